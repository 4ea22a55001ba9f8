//! Candidate runs side by side: the reproducer's test files and the
//! Fixer's patches, each run in its own worktree and sandbox.

/// `run` applied to each of `items` (with its index), at most `runs` at
/// once (`[pipeline] parallel_runs`; at least one); the results in the
/// items' order, None for an item whose thread panicked.
pub fn map<T: Sync, R: Send>(
    runs: usize,
    items: &[T],
    run: impl Fn(usize, &T) -> R + Sync,
) -> Vec<Option<R>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = runs.max(1).min(items.len());
    let done: Vec<(usize, Option<R>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(item) = items.get(k) else {
                            break;
                        };
                        let ran =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(k, item)));
                        done.push((k, ran.ok()));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    for (k, r) in done {
        if let Some(slot) = out.get_mut(k) {
            *slot = r;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_and_a_panic_is_none() {
        let items: Vec<usize> = (0..7).collect();
        for runs in [0, 1, 3, 9] {
            let got = map(runs, &items, |k, &x| {
                assert_eq!(k, x);
                x * 10
            });
            assert_eq!(got, (0..7).map(|x| Some(x * 10)).collect::<Vec<_>>());
        }
        let got = map(2, &[1, 2], |_, &x| {
            if x == 2 {
                std::panic::panic_any("a run's bug");
            }
            x
        });
        assert_eq!(got[0], Some(1));
        assert_eq!(got[1], None);
    }
}

#[cfg(test)]
mod cap {
    use super::map;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Never more than `runs` at once, and that many when there is work.
    #[test]
    fn no_more_than_the_cap_run_at_once() {
        for (runs, items, most) in [(1, 6, 1), (2, 6, 2), (3, 2, 2), (4, 8, 4)] {
            let now = AtomicUsize::new(0);
            let peak = AtomicUsize::new(0);
            let work: Vec<usize> = (0..items).collect();
            map(runs, &work, |k, _| {
                let n = now.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(n, SeqCst);
                // The first `most` wait for each other (a while at most),
                // so that the cap is reached when it is allowed.
                let since = std::time::Instant::now();
                while k < most && now.load(SeqCst) < most && since.elapsed().as_secs() < 5 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
                now.fetch_sub(1, SeqCst);
            });
            assert_eq!(peak.load(SeqCst), most, "runs {runs}, items {items}");
        }
    }
}
