//! Prefix-cache keys: the hash chain over full blocks (module docs of `blocks`, "Prefix
//! caching") and the hasher of the allocator's maps. Deterministic across runs, machines and
//! languages: `servelab.reference.blocks` computes the same integers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The parent key of a sequence's first block.
pub const ROOT_KEY: u64 = 0;


const KEY_SEED: u64 = 0x7365_7276_656c_6162; // "servelab"
pub(super) const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijection of u64 with full avalanche.
pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn step(h: u64, x: u64) -> u64 {
    mix((h ^ x).wrapping_add(GOLDEN))
}

/// The cache key of a full block: a hash of its parent's key and its own tokens.
pub fn block_key(parent: u64, tokens: &[u32]) -> u64 {
    tokens.iter().fold(step(KEY_SEED, parent), |h, &t| step(h, t as u64))
}

/// Hashes a u64 through [`mix`]: cache keys are mixed already (so mixing again is cheap
/// insurance), and sequence ids are often small consecutive integers, which SipHash would
/// handle well but slowly and an identity hash badly (hashbrown reads the top bits).
#[derive(Default)]
pub(super) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(v);
    }
    fn write_i64(&mut self, v: i64) {
        self.0 = mix(v as u64);
    }
}

pub(super) type Map<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_pinned() {
        // The reference computes the same integers (tests/test_blocks_cases.py pins them too).
        assert_eq!(block_key(ROOT_KEY, &[]), step(KEY_SEED, 0));
        assert_ne!(block_key(ROOT_KEY, &[1, 2]), block_key(ROOT_KEY, &[2, 1]));
        assert_ne!(block_key(1, &[1, 2]), block_key(2, &[1, 2]));
    }
}
