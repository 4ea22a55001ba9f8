#!/usr/bin/env python3
"""Regenerates the reference renderings in tests/fixtures/chat_templates/.

Each case of cases.json names a Jinja chat template, the model's BOS and
EOS token texts, and the file the rendering of messages.json goes to. The
rendering is done as Hugging Face transformers' `apply_chat_template` does
it: jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks
and the loopcontrols extension, its `tojson` filter (json.dumps, non-ASCII
kept), the `raise_exception` and `strftime_now` globals, and
add_generation_prompt=True. `strftime_now` is pinned to 26 Jul 2024 so the
fixtures do not change with the day they are made.

Usage (jinja2 3.1 in any virtual environment):
    python3 -m venv /tmp/jvenv && /tmp/jvenv/bin/pip install jinja2
    /tmp/jvenv/bin/python scripts/render-chat-fixtures.py
"""
import datetime
import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.sandbox

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "chat_templates"
PINNED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return PINNED_NOW.strftime(format)


def main():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    messages = json.loads((FIXTURES / "messages.json").read_text(encoding="utf-8"))
    for case in json.loads((FIXTURES / "cases.json").read_text(encoding="utf-8")):
        source = (FIXTURES / case["template"]).read_text(encoding="utf-8")
        rendered = env.from_string(source).render(
            messages=messages,
            add_generation_prompt=True,
            bos_token=case["bos_token"],
            eos_token=case["eos_token"],
        )
        (FIXTURES / case["expected"]).write_text(rendered, encoding="utf-8", newline="")
        print(f"{case['expected']}: {len(rendered)} characters")


if __name__ == "__main__":
    main()
