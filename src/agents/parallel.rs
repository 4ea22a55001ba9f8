//! Candidate runs side by side: the reproducer's test files and the
//! Fixer's patches, each run in its own worktree and sandbox.

/// Runs at once: each is a worktree, an install and a test run in a
/// sandbox, beside the model's threads (two cores keep three busy while
/// one waits on its install).
pub const MAX_PARALLEL_RUNS: usize = 3;

/// `run` applied to each of `items` (with its index), at most
/// [`MAX_PARALLEL_RUNS`] at once; the results in the items' order, None
/// for an item whose thread panicked.
pub fn map<T: Sync, R: Send>(items: &[T], run: impl Fn(usize, &T) -> R + Sync) -> Vec<Option<R>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = MAX_PARALLEL_RUNS.min(items.len());
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
        let got = map(&items, |k, &x| {
            assert_eq!(k, x);
            x * 10
        });
        assert_eq!(got, (0..7).map(|x| Some(x * 10)).collect::<Vec<_>>());
        let got = map(&[1, 2], |_, &x| {
            if x == 2 {
                std::panic::panic_any("a run's bug");
            }
            x
        });
        assert_eq!(got[0], Some(1));
        assert_eq!(got[1], None);
    }
}
