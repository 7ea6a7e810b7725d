//! The allocator's tests: block semantics by hand, then long random sequences of operations.

use super::bulk::{AppendMany, OP_ALLOCATE, OP_APPEND, OP_FREE, STATUS_OK, STATUS_OUT_OF_BLOCKS};
use super::keys::{mix, GOLDEN};
use super::*;

fn toks(v: &[i64]) -> Vec<i64> {
    v.to_vec()
}

/// A seeded generator for the random tests: `rnd(n)` is a number in `0..n`.
fn rng(mut state: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        state = mix(state.wrapping_add(GOLDEN));
        state % n
    }
}

#[test]
fn allocate_append_free() {
    let mut a = BlockAllocator::new(4, 2, false).unwrap();
    assert_eq!(a.allocate(7, &toks(&[1, 2, 3]), None).unwrap(), &[0, 1]);
    assert_eq!(a.num_free_blocks(), 2);
    assert_eq!(a.append(7, 4).unwrap(), None);
    assert_eq!(a.append(7, 5).unwrap(), None);
    assert_eq!(a.block_table(7).unwrap(), &[0, 1, 2]);
    a.free(7).unwrap();
    // Tail first: 3 was never used, then 2, 1, 0.
    assert_eq!(a.free_queue(), vec![3, 2, 1, 0]);
    assert!(matches!(a.free(7), Err(CoreError::Key(_))));
    a.check_invariants().unwrap();
}

#[test]
fn fork_copy_on_write() {
    let mut a = BlockAllocator::new(4, 4, false).unwrap();
    a.allocate(1, &toks(&[1, 2, 3, 4, 5]), None).unwrap();
    a.fork(1, 2).unwrap();
    assert_eq!(a.ref_counts(), vec![2, 2, 0, 0]);
    assert_eq!(a.append(2, 9).unwrap(), Some((1, 2)));
    assert_eq!(a.block_table(2).unwrap(), &[0, 2]);
    assert_eq!(a.block_tokens(1).unwrap(), &[5]);
    assert_eq!(a.block_tokens(2).unwrap(), &[5, 9]);
    // The parent is now the only owner of block 1: no copy.
    assert_eq!(a.append(1, 6).unwrap(), None);
    assert_eq!(a.num_copies(), 1);
    a.check_invariants().unwrap();
}

#[test]
fn prefix_hits_leave_one_token() {
    let mut a = BlockAllocator::new(8, 2, true).unwrap();
    a.allocate(1, &toks(&[1, 2, 3, 4, 5]), None).unwrap();
    a.free(1).unwrap();
    assert_eq!(a.free_queue(), vec![3, 4, 5, 6, 7, 2, 1, 0]);
    assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 9]), None).unwrap(), &[0, 1, 3]);
    assert_eq!(a.num_cached_tokens(2).unwrap(), 4);
    // Exactly the cached chain: the last block is recomputed.
    assert_eq!(a.allocate(3, &toks(&[1, 2, 3, 4]), None).unwrap(), &[0, 4]);
    assert_eq!(a.num_cached_tokens(3).unwrap(), 2);
    // Lookups: 2 + 2 + 1 (at most (n - 1) / block_size per prompt); hits: 0 + 2 + 1.
    assert_eq!((a.num_hits(), a.num_lookups()), (3, 5));
    a.check_invariants().unwrap();
}

/// Keys are findable only once computed: `allocate(.., Some(c))` registers the full blocks
/// inside the first `c` tokens, `mark_computed` the rest, `append` everything before it.
#[test]
fn keys_registered_when_computed() {
    let mut a = BlockAllocator::new(16, 2, true).unwrap();
    a.allocate(1, &toks(&[1, 2, 3, 4, 5, 6, 7]), Some(3)).unwrap(); // blocks 0-3, block 0 computed
    assert_eq!((a.num_cached_blocks(), a.block_key_of(0).unwrap().is_some()), (1, true));
    // a reader finds block 0 only: block 1 ([3, 4]) has no KV yet
    assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 9]), Some(0)).unwrap(), &[0, 4, 5]);
    a.mark_computed(1, 6).unwrap(); // blocks 1 and 2
    a.mark_computed(1, 6).unwrap(); // idempotent
    a.mark_computed(1, 2).unwrap(); // going back changes nothing
    assert_eq!(a.num_cached_blocks(), 3);
    // seq 2 computes [3, 4] too, but seq 1's copy is the cached one (first wins)
    a.mark_computed(2, 5).unwrap();
    assert_eq!((a.block_key_of(4).unwrap(), a.num_cached_blocks()), (None, 3));
    assert_eq!(a.allocate(3, &toks(&[1, 2, 3, 4, 5, 6, 0]), Some(0)).unwrap(), &[0, 1, 2, 6]);
    // an append that fills a block offers every earlier block too
    a.allocate(4, &toks(&[8, 8, 8, 8, 8]), Some(0)).unwrap();
    a.append(4, 8).unwrap();
    assert_eq!(a.num_cached_blocks(), 6);
    let e = a.mark_computed(4, 7).unwrap_err();
    assert_eq!(e, CoreError::invalid("num_computed must be an integer in [0, 6], got 7"));
    assert!(matches!(a.mark_computed(9, 0), Err(CoreError::Key(_))));
    let e = a.allocate(5, &[1], Some(-1)).unwrap_err();
    assert_eq!(e, CoreError::invalid("num_computed must be an integer in [0, 1], got -1"));
    a.check_invariants().unwrap();
    // without prefix caching it only checks
    let mut b = BlockAllocator::new(4, 2, false).unwrap();
    b.allocate(1, &[1, 2, 3], Some(0)).unwrap();
    b.mark_computed(1, 3).unwrap();
    assert_eq!(b.num_cached_blocks(), 0);
}

/// §8 milestone 4b: an evicted cached block moves to the host tier; a prompt that misses
/// the GPU but hits the host gets it back in a fresh block, reported as a recall.
#[test]
fn host_tier_offloads_and_recalls() {
    let mut a = BlockAllocator::with_host_tier(3, 2, true, 2, "lru").unwrap();
    a.allocate(1, &[1, 2, 3, 4, 5], None).unwrap(); // blocks 0, 1 keyed; 2 partial
    a.free(1).unwrap(); // queue: 2, 1, 0
    let (k0, k1) = (a.block_key_of(0).unwrap().unwrap(), a.block_key_of(1).unwrap().unwrap());
    a.allocate(2, &[9, 9, 9, 9, 9], None).unwrap(); // takes 2, 1, 0: evicts k1 then k0
    let t = a.take_transfers();
    let kinds: Vec<_> = t.iter().map(|x| (x.kind, x.block, x.key)).collect();
    assert!(t.iter().all(|x| x.hits == 0)); // never reused on the GPU
    assert_eq!(kinds, vec![(TransferKind::Offload, Some(1), k1), (TransferKind::Offload, Some(0), k0)]);
    assert_eq!((a.num_host_cached_blocks(), a.host_keys()), (2, vec![k1, k0]));
    a.free(2).unwrap(); // queue: 0, 1, 2 (tail first); 0 and 1 keyed by seq 2's blocks
    // [1, 2, 3, 4] misses the GPU and hits the host twice: two fresh blocks, no compute
    assert_eq!(a.allocate(3, &[1, 2, 3, 4, 7], Some(0)).unwrap(), &[0, 1, 2]);
    assert_eq!((a.num_cached_tokens(3).unwrap(), a.num_host_hits(), a.num_hits()), (4, 2, 0));
    let t: Vec<_> = a.take_transfers().iter().map(|x| (x.kind, x.block, x.key)).collect();
    // taking block 0 offloads seq 2's first block, which drops the oldest host entry (k1)
    // only after k0 and k1 left the host for the GPU: nothing is dropped
    assert_eq!(t.iter().filter(|x| x.0 == TransferKind::Recall).map(|x| (x.1, x.2)).collect::<Vec<_>>(),
               vec![(Some(0), k0), (Some(1), k1)]);
    assert_eq!(a.block_key_of(0).unwrap(), Some(k0));
    assert_eq!(a.stats().num_offloads, 4);
    a.check_invariants().unwrap();
    // the hits policy drops the least hit entry, LRU the oldest
    let e = BlockAllocator::with_host_tier(3, 2, false, 1, "lru").unwrap_err();
    assert!(e.to_string().contains("needs prefix_caching=True"), "{e}");
    let e = BlockAllocator::with_host_tier(3, 2, true, 1, "lfu").unwrap_err();
    assert_eq!(e.to_string(), "host_policy must be 'lru' or 'hits', got \"lfu\"");
    assert!(BlockAllocator::with_host_tier(3, 2, true, -1, "lru").is_err());
}

/// With `hits`, a hot prefix survives a stream of one-off prompts on a full host tier.
#[test]
fn hits_policy_keeps_the_hot_prefix() {
    let run = |policy: &str| {
        let mut a = BlockAllocator::with_host_tier(2, 2, true, 2, policy).unwrap();
        let hot = [7, 7, 1];
        for r in 0..3 {
            a.allocate(100 + r, &hot, None).unwrap(); // hit twice on the GPU
            a.free(100 + r).unwrap();
        }
        for i in 0..4 {
            a.allocate(i, &[i, i, i], None).unwrap(); // one-off prompts evict
            a.free(i).unwrap();
        }
        a.allocate(50, &hot, None).unwrap();
        a.num_host_hits()
    };
    assert_eq!((run("lru"), run("hits")), (0, 1));
}

#[test]
fn out_of_blocks_changes_nothing() {
    let mut a = BlockAllocator::new(3, 2, true).unwrap();
    a.allocate(1, &toks(&[1, 2, 3]), None).unwrap();
    let before = (a.stats(), a.free_queue(), a.ref_counts());
    assert_eq!(a.allocate(2, &toks(&[1, 2, 3, 4, 5]), None), Err(out_of_blocks(2, 2, 1)).map(|_: ()| &[][..]));
    assert_eq!(before, (a.stats(), a.free_queue(), a.ref_counts()));
    a.append(1, 4).unwrap();
    a.allocate(3, &toks(&[1, 2, 3, 4, 5]), None).unwrap();
    assert_eq!(a.append(3, 6), Ok(None)); // block 2 has a free slot
    let before = (a.stats(), a.free_queue(), a.ref_counts());
    assert_eq!(a.append(3, 7), Err(out_of_blocks(3, 1, 0)));
    assert_eq!(before, (a.stats(), a.free_queue(), a.ref_counts()));
    a.check_invariants().unwrap();
}

/// A small deterministic soak: random ops, invariants after each.
#[test]
fn random_ops_keep_invariants() {
    let mut rnd = rng(0x1234_5678_u64);
    for trial in 0..40 {
        let (nb, bs) = (1 + rnd(12) as i64, 1 + rnd(4) as i64);
        let mut a = match trial % 4 {
            0 => BlockAllocator::with_host_tier(nb, bs, true, 1 + rnd(6) as i64, ["lru", "hits"][trial / 4 % 2]).unwrap(),
            t => BlockAllocator::new(nb, bs, t % 2 == 0).unwrap(),
        };
        let mut next_id = 0i64;
        for _ in 0..300 {
            let ids = a.seq_ids();
            match rnd(6) {
                0 | 1 => {
                    let len = 1 + rnd(9) as usize;
                    let t: Vec<i64> = (0..len).map(|_| rnd(2) as i64).collect();
                    let computed = [None, Some(0), Some(rnd(len as u64 + 1) as i64)][rnd(3) as usize];
                    let _ = a.allocate(next_id, &t, computed);
                    next_id += 1;
                }
                2 if !ids.is_empty() => {
                    let _ = a.append(ids[rnd(ids.len() as u64) as usize], rnd(2) as i64);
                }
                3 if !ids.is_empty() => {
                    a.fork(ids[rnd(ids.len() as u64) as usize], next_id).unwrap();
                    next_id += 1;
                }
                4 if !ids.is_empty() => a.free(ids[rnd(ids.len() as u64) as usize]).unwrap(),
                5 if !ids.is_empty() => {
                    let s = ids[rnd(ids.len() as u64) as usize];
                    let n = a.num_tokens(s).unwrap() as u64;
                    a.mark_computed(s, rnd(n + 1) as i64).unwrap();
                }
                _ => {}
            }
            a.check_invariants().unwrap();
        }
        for id in a.seq_ids() {
            a.free(id).unwrap();
        }
        assert_eq!(a.num_free_blocks(), a.num_blocks());
        a.check_invariants().unwrap();
    }
}

/// `append_same(s, t, k)` is `k` appends of `t`: the same tables, queue, keys and counters.
#[test]
fn append_same_is_repeated_appends() {
    let mut rnd = rng(0x5eed_u64);
    for trial in 0..200 {
        let (nb, bs) = (2 + rnd(12) as i64, 1 + rnd(5) as i64);
        let mut bulk = BlockAllocator::new(nb, bs, trial % 3 != 0).unwrap();
        let t: Vec<i64> = (0..1 + rnd(7)).map(|_| rnd(2) as i64).collect();
        if bulk.allocate(1, &t, Some(rnd(t.len() as u64 + 1) as i64)).is_err() {
            continue;
        }
        if rnd(2) == 0 {
            bulk.fork(1, 2).unwrap(); // a shared last block: the first append copies it
        }
        let mut one = bulk.clone();
        let (tok, k) = (rnd(3) as i64, rnd(3 * bs as u64 + 2) as usize);
        let got = bulk.append_same(1, tok, k).map_err(|e| e.to_string());
        let mut want = Ok(());
        for _ in 0..k {
            if let Err(e) = one.append(1, tok) {
                want = Err(e.to_string());
                break;
            }
        }
        assert_eq!(got.is_ok(), want.is_ok(), "trial {trial}");
        assert_eq!((bulk.block_tables(), bulk.free_queue(), bulk.stats()), (one.block_tables(), one.free_queue(), one.stats()));
        assert_eq!(bulk.num_tokens(1).unwrap(), one.num_tokens(1).unwrap());
        for b in 0..nb {
            assert_eq!(bulk.block_key_of(b).unwrap(), one.block_key_of(b).unwrap(), "trial {trial}");
            assert_eq!(bulk.block_tokens(b).unwrap(), one.block_tokens(b).unwrap(), "trial {trial}");
        }
        bulk.check_invariants().unwrap();
    }
}

/// `append_many` does what one `append` per sequence does, in order, and stops at the
/// first refusal with nothing changed by it; `free_many` as one `free` each.
#[test]
fn append_many_is_appends_in_order() {
    let mut rnd = rng(0x9abc_def0_u64);
    for trial in 0..60 {
        let (nb, bs) = (1 + rnd(16) as i64, 1 + rnd(4) as i64);
        let mut bulk = BlockAllocator::new(nb, bs, trial % 2 == 0).unwrap();
        let mut one = bulk.clone();
        for id in 0..6i64 {
            let t: Vec<i64> = (0..1 + rnd(5)).map(|_| rnd(2) as i64).collect();
            let ok = bulk.allocate(id, &t, None).is_ok();
            assert_eq!(one.allocate(id, &t, None).is_ok(), ok);
            if ok && rnd(3) == 0 {
                bulk.fork(id, 100 + id).unwrap();
                one.fork(id, 100 + id).unwrap();
            }
        }
        for _ in 0..8 {
            let ids = bulk.seq_ids();
            let toks: Vec<i64> = ids.iter().map(|_| rnd(3) as i64).collect();
            let got = bulk.append_many(&ids, &toks).unwrap();
            let mut want = AppendMany::default();
            for (&s, &t) in ids.iter().zip(&toks) {
                match one.append(s, t) {
                    Ok(c) => {
                        want.done += 1;
                        want.copy_src.push(c.map_or(-1, |c| c.0 as i64));
                        want.copy_dst.push(c.map_or(-1, |c| c.1 as i64));
                    }
                    Err(CoreError::OutOfBlocks(_)) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(got, want, "trial {trial}");
            assert_eq!(bulk.block_tables(), one.block_tables());
            assert_eq!(bulk.free_queue(), one.free_queue());
            bulk.check_invariants().unwrap();
            if got.done < ids.len() {
                // preempt the newest, as an engine would
                let victim = *ids.last().unwrap();
                bulk.free_many(&[victim]).unwrap();
                one.free(victim).unwrap();
            }
        }
    }
    let mut a = BlockAllocator::new(4, 2, false).unwrap();
    a.allocate(1, &[5], None).unwrap();
    let e = a.append_many(&[1, 2], &[0, 0]).unwrap_err();
    assert_eq!(e, CoreError::key("seq_ids[1]: seq_id 2 is not allocated"));
    assert_eq!(a.num_tokens(1).unwrap(), 2); // the append before it stays done
    let e = a.append_many(&[1], &[-1]).unwrap_err();
    assert_eq!(e.to_string(), format!("seq_ids[0]: token_id must be in [0, {TOKEN_LIMIT}), got -1"));
    assert!(a.append_many(&[1], &[]).unwrap_err().to_string().contains("same length"));
    let e = a.free_many(&[1, 1]).unwrap_err();
    assert_eq!(e, CoreError::key("seq_ids[1]: seq_id 1 is not allocated"));
    assert_eq!(a.num_seqs(), 0);
}

/// `replay` with every token valid (checked once) and with a bad one (checked per op) ends
/// in the same state and statuses up to the bad prompt, whose op is named.
#[test]
fn replay_checks_tokens_once_and_names_the_op() {
    let toks = [1, 2, 3, 4, 1, 2, 9];
    let offsets = [0, 4, 7];
    let op = [OP_ALLOCATE, OP_ALLOCATE, OP_APPEND, OP_ALLOCATE, OP_FREE];
    let seq = [1, 2, 1, 3, 1];
    let arg = [0, 1, 7, 1, 0];
    let mut a = BlockAllocator::new(3, 2, true).unwrap();
    let st = a.replay(&op, &seq, &arg, &toks, &offsets).unwrap();
    // prompt 1 shares its first block with prompt 0: the pool is full after two allocates
    assert_eq!(st, vec![STATUS_OK, STATUS_OK, STATUS_OUT_OF_BLOCKS, STATUS_OUT_OF_BLOCKS, STATUS_OK]);
    let mut bad = toks;
    bad[5] = -4; // in prompt 1 only
    let mut b = BlockAllocator::new(3, 2, true).unwrap();
    let e = b.replay(&op, &seq, &arg, &bad, &offsets).unwrap_err();
    assert_eq!(e.to_string(), format!("op 1: token_ids[1] must be in [0, {TOKEN_LIMIT}), got -4"));
    assert_eq!(b.seq_ids(), vec![1]);
    let e = BlockAllocator::new(3, 2, true).unwrap().replay(&[0], &[1], &[0], &[], &[0, 0]).unwrap_err();
    assert_eq!(e.to_string(), "op 0: token_ids must not be empty");
}
