(function () {
  function measure() {
    var plots = document.querySelectorAll('svg.plot');
    var rendered = 0, boxes = [];
    for (var i = 0; i < plots.length; i++) {
      var marks = plots[i].querySelectorAll('.mark');
      var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (var j = 0; j < marks.length; j++) {
        var b = marks[j].getBBox();
        if (b.width <= 0 && b.height <= 0) continue;
        x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y);
        x1 = Math.max(x1, b.x + b.width); y1 = Math.max(y1, b.y + b.height);
      }
      if (x1 - x0 > 0 && y1 - y0 > 0) rendered++;
      var r = plots[i].getBoundingClientRect();
      boxes.push([Math.round(r.left + window.scrollX), Math.round(r.top + window.scrollY),
                  Math.round(r.width), Math.round(r.height)].join(','));
    }
    document.body.setAttribute('data-plots-rendered', String(rendered));
    document.body.setAttribute('data-plot-boxes', boxes.join(';'));
  }
  measure();
  window.addEventListener('load', measure);
})();
