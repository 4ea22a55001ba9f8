//! How llama.cpp splits one `decode` call's batch into forward passes
//! (micro-batches, `ubatch`), so the scheduler can count what each of its
//! steps cost: every micro-batch reads every weight once, so on a GPU, or
//! on a CPU decoding a few sequences, a step split in two costs about two
//! steps.
//!
//! The rules are llama.cpp's (`llama_batch_allocr::split_simple` and
//! `split_equal` in `src/llama-batch.cpp`, the version `llama-cpp-sys-2`
//! 0.1.161 vendors), for batches whose tokens each belong to one sequence:
//! - one KV cache for every sequence (unified): the batch's tokens in
//!   order, `n_ubatch` at a time;
//! - a KV stream per sequence: a micro-batch takes sequences whose ids
//!   follow each other (`s`, `s + 1`, ...) in the order the batch first
//!   names them, and the same number of tokens of each, so sequences of
//!   unequal lengths, out of order or with gaps between their ids take
//!   several.

/// Forward passes llama.cpp makes of a batch whose rows belong to the
/// sequences `seqs`, in order, with micro-batches of at most `n_ubatch`
/// tokens, on a unified cache or on one stream per sequence.
pub fn micro_batches(seqs: &[i32], n_ubatch: usize, unified: bool) -> usize {
    if seqs.is_empty() {
        return 0;
    }
    let n_ubatch = n_ubatch.max(1);
    if unified {
        return seqs.len().div_ceil(n_ubatch);
    }
    // Each sequence's rows, in batch order.
    let mut order: Vec<i32> = Vec::new();
    let mut rows: Vec<Vec<usize>> = Vec::new();
    for (i, &s) in seqs.iter().enumerate() {
        match order.iter().position(|&o| o == s) {
            Some(k) => rows[k].push(i),
            None => {
                order.push(s);
                rows.push(vec![i]);
            }
        }
    }
    let mut used = vec![false; seqs.len()];
    let mut taken = vec![0usize; order.len()];
    let mut count = 0;
    loop {
        // The sequences of this micro-batch: from the first row not yet
        // used, each next one the previous id + 1, in batch order.
        let mut set: Vec<usize> = Vec::new();
        let mut last = -1;
        for (i, &s) in seqs.iter().enumerate() {
            if used[i] {
                continue;
            }
            let k = order.iter().position(|&o| o == s).unwrap_or(0);
            if set.contains(&k) || !(set.is_empty() || s == last + 1) {
                continue;
            }
            set.push(k);
            last = s;
            if set.len() > n_ubatch {
                break;
            }
        }
        if set.is_empty() {
            return count;
        }
        // As many tokens of each as all of them still have.
        let mut per_seq = 0;
        while set.iter().all(|&k| taken[k] < rows[k].len()) {
            for &k in &set {
                used[rows[k][taken[k]]] = true;
                taken[k] += 1;
            }
            per_seq += 1;
            if (per_seq + 1) * set.len() > n_ubatch {
                break;
            }
        }
        count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_passes_by_cache_layout() {
        #[rustfmt::skip]
        let cases: &[(&[i32], usize, usize, usize)] = &[
            // (rows' sequences, n_ubatch, unified passes, streams passes)
            (&[], 512, 0, 0),
            // Four candidates, one token each, ids in order: one pass.
            (&[0, 1, 2, 3], 512, 1, 1),
            // The same rows out of order: 0 then 3 cannot follow 2.
            (&[2, 3, 0, 1], 512, 1, 2),
            (&[3, 2, 1, 0], 512, 1, 4),
            // A gap in the ids (a candidate that stopped).
            (&[0, 1, 3], 512, 1, 2),
            // Unequal lengths (a draft): one token of each, then the rest.
            (&[0, 1, 1, 1], 512, 1, 2),
            // Equal lengths: one pass.
            (&[0, 0, 1, 1, 2, 2], 512, 1, 1),
            // A prompt beside decoding candidates.
            (&[0, 1, 2, 2, 2, 2], 512, 1, 2),
            // More tokens than a micro-batch holds.
            (&[0; 10], 4, 3, 3),
            (&[0, 1, 0, 1, 0, 1], 4, 2, 2),
        ];
        for &(seqs, n_ubatch, unified, streams) in cases {
            assert_eq!(
                micro_batches(seqs, n_ubatch, true),
                unified,
                "{seqs:?} unified"
            );
            assert_eq!(
                micro_batches(seqs, n_ubatch, false),
                streams,
                "{seqs:?} streams"
            );
        }
    }
}
