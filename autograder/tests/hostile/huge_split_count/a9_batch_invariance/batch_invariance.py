"""Trick: return a huge value that the grader computes with before it checks it: the split-K
test cut ``np.arange(K)`` into ``split_count`` pieces in the grader's own process (1.7 GB and
tens of seconds at 6 million). The test now bounds the count (1 to K) first."""


def split_count(batch_size, k, num_units=16, min_piece=8):
    return 6_000_000


def reduce_in_pieces(x, w, starts):
    raise NotImplementedError


def piece_starts(k, pieces):
    return [0] * 6_000_000


def matmul_split_k(x, w, num_units=16):
    raise NotImplementedError


def matmul_batch_invariant(x, w, block_k=32):
    raise NotImplementedError
