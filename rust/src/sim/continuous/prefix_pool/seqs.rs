//! The exact-key pool's [`Seq`]s ([`Seqs`]), one for each request that holds blocks, by request:
//! a slab of the live ones behind a table of `u32`, where a `Seq` for every request of the
//! workload (80 bytes each) was written whole at the start of every run and read far apart.
//! The live ones are the running requests, a few hundred, so they stay in cache.

use std::ops::{Index, IndexMut};

use super::{Seq, Seqs, NONE};

impl Seqs {
    /// None open, for `n` requests.
    pub(super) fn new(n: usize) -> Self {
        Seqs { at: vec![NONE; n], slab: Vec::new(), spare: Vec::new(), empty: Seq::default() }
    }

    /// Request `r` holds blocks: its `Seq` becomes `seq`.
    pub(super) fn open(&mut self, r: usize, seq: Seq) {
        if self.at[r] != NONE {
            self.slab[self.at[r] as usize] = seq;
            return;
        }
        let i = match self.spare.pop() {
            Some(i) => {
                self.slab[i as usize] = seq;
                i
            }
            None => {
                self.slab.push(seq);
                (self.slab.len() - 1) as u32
            }
        };
        self.at[r] = i;
    }

    /// Request `r` holds no blocks any more.
    pub(super) fn close(&mut self, r: usize) {
        let i = std::mem::replace(&mut self.at[r], NONE);
        if i != NONE {
            self.slab[i as usize] = Seq::default();
            self.spare.push(i);
        }
    }
}

impl Index<usize> for Seqs {
    type Output = Seq;

    #[inline(always)]
    fn index(&self, r: usize) -> &Seq {
        match self.at[r] {
            NONE => &self.empty,
            i => &self.slab[i as usize],
        }
    }
}

impl IndexMut<usize> for Seqs {
    /// (a request that holds no blocks is given an empty `Seq`)
    #[inline(always)]
    fn index_mut(&mut self, r: usize) -> &mut Seq {
        if self.at[r] == NONE {
            self.open(r, Seq::default());
        }
        &mut self.slab[self.at[r] as usize]
    }
}
