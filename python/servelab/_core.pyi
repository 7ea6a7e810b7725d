# Typed surface of the Rust extension (rust/src/py/). Checked by `python -m mypy.stubtest
# servelab._core` in `make test`: a function added in Rust must be added here.
from typing import Any, Iterable, final

import numpy as np
import numpy.typing as npt

from servelab.continuous_options import ContinuousOptions
from servelab.hw_model import Efficiency, GpuSpec, ModelSpec
from servelab.workload import Requests

# PyO3 exports every name it registers in __all__; keep this list in step with rust/src/py/.
__all__ = [
    "__version__",
    "MAX_DIM",
    "MAX_TOKENS",
    "MAX_STEP_TOKENS",
    "validate_model",
    "validate_gpu",
    "validate_efficiency",
    "param_count",
    "weight_bytes",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "max_batch",
    "step_cost_columns",
    "step_cost_many_into",
    "MAX_REQUEST_TOKENS",
    "sim_batch1",
    "sim_static_batching",
    "sim_fixed_service",
    "sim_continuous_batching",
    "MAX_SPEC_K",
    "OutOfBlocks",
    "MAX_NUM_BLOCKS",
    "MAX_BLOCK_SIZE",
    "TOKEN_LIMIT",
    "ROOT_KEY",
    "BlockAllocator",
    "block_key",
    "MAX_CARDS",
    "sim_data_parallel",
    "sim_disaggregated",
]

__version__: str

# ---- paper GPU (rust/src/cost.rs) ------------------------------------------------------------

MAX_DIM: int
MAX_TOKENS: int
MAX_STEP_TOKENS: int

# Specs and requests are read by attribute name: any object with the fields of these classes
# works, and the library passes the classes themselves.

# One card's hardware, the first argument of the step-cost functions and of every simulator.
_Hardware = tuple[ModelSpec, GpuSpec, Efficiency]
_I64 = npt.NDArray[np.int64]

def validate_model(model: ModelSpec) -> None: ...
def validate_gpu(gpu: GpuSpec) -> None: ...
def validate_efficiency(efficiency: Efficiency) -> None: ...
def param_count(model: ModelSpec) -> int: ...
def weight_bytes(model: ModelSpec) -> float: ...
def kv_bytes_per_token(model: ModelSpec) -> float: ...
def kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, mem_util: float) -> int: ...
def max_batch(model: ModelSpec, gpu: GpuSpec, context_len: int, mem_util: float) -> int: ...
def step_cost_columns(
    hw: _Hardware, new_tokens: _I64, context_len: _I64, batch_size: _I64 | None = None
) -> dict[str, Any]: ...
def step_cost_many_into(
    hw: _Hardware, new_tokens: _I64, context_len: _I64, offsets: _I64, out: dict[str, np.ndarray]
) -> None: ...

# ---- serving simulator (rust/src/sim/) -------------------------------------------------------

MAX_REQUEST_TOKENS: int
_F64 = npt.NDArray[np.float64]
# one card's parameters: max_num_seqs, max_num_batched_tokens, block_size, num_blocks (ints),
# chunked_prefill (a bool)
_Card = dict[str, int | bool]

# shared prefixes: the (parent, length) columns of a servelab.workload.SharedPrefixes
_Shared = tuple[_I64, _I64]

def sim_batch1(
    hw: _Hardware, requests: Requests, trace: bool, admission: tuple[float, _I64] | None = None
) -> dict[str, object]: ...
def sim_static_batching(
    hw: _Hardware, requests: Requests, params: tuple[int, float, bool], trace: bool
) -> dict[str, object]: ...
def sim_fixed_service(arrival_s: _F64, service_s: float, slo_s: float | None) -> dict[str, object]: ...
# options: a ContinuousOptions record, read by attribute name, with num_blocks resolved (an int);
# host_s_per_token: the host tier's copy price per token (read when options.host_blocks > 0);
# twin / queues: the per-step twin, and it recording the queues (serving_core.run_twin)
def sim_continuous_batching(
    hw: _Hardware, requests: Requests, options: ContinuousOptions, host_s_per_token: float,
    twin: bool = False, queues: bool = False
) -> dict[str, object]: ...

MAX_SPEC_K: int

# ---- paged KV block allocator (rust/src/blocks/) --------------------------------------------

MAX_NUM_BLOCKS: int
MAX_BLOCK_SIZE: int
TOKEN_LIMIT: int
ROOT_KEY: int

class OutOfBlocks(RuntimeError): ...

def block_key(parent_key: int, token_ids: Iterable[int]) -> int: ...
@final
class BlockAllocator:
    def __new__(
        cls, num_blocks: int, block_size: int, prefix_caching: bool = False, host_blocks: int = 0,
        host_policy: str = "lru",
    ) -> BlockAllocator: ...
    def take_transfers(self) -> list[tuple[str, int | None, int, int]]: ...
    def host_keys(self) -> list[int]: ...
    def allocate(self, seq_id: int, token_ids: Iterable[int], num_computed: int | None = None) -> list[int]: ...
    def mark_computed(self, seq_id: int, num_computed: int) -> None: ...
    def append(self, seq_id: int, token_id: int) -> tuple[int, int] | None: ...
    def fork(self, parent_id: int, child_id: int) -> None: ...
    def free(self, seq_id: int) -> None: ...
    def block_table(self, seq_id: int) -> list[int]: ...
    def num_tokens(self, seq_id: int) -> int: ...
    def num_cached_tokens(self, seq_id: int) -> int: ...
    def can_allocate(self, n_tokens: int) -> bool: ...
    def can_append(self, seq_id: int) -> bool: ...
    def __contains__(self, key: int, /) -> bool: ...
    def __len__(self) -> int: ...
    def seq_ids(self) -> list[int]: ...
    def block_tables(self) -> tuple[_I64, _I64, _I64]: ...
    def block_tokens(self, block_id: int) -> list[int]: ...
    def key_of(self, block_id: int) -> int | None: ...
    def ref_counts(self) -> _I64: ...
    def free_queue(self) -> _I64: ...
    # the sizes and counters are stats()'s; the settings and the free count have getters
    def stats(self) -> dict[str, int]: ...
    @property
    def prefix_caching(self) -> bool: ...
    @property
    def host_policy(self) -> str: ...
    @property
    def num_free_blocks(self) -> int: ...
    def replay(self, op: _I64, seq: _I64, arg: _I64, tokens: _I64, offsets: _I64) -> _I64: ...
    def append_many(self, seq_ids: _I64, token_ids: _I64) -> tuple[int, _I64, _I64]: ...
    def free_many(self, seq_ids: _I64) -> None: ...
    def check_invariants(self) -> None: ...

# multi-card simulators (rust/src/py/parallel.rs): the keys of sim_continuous_batching's dict
# (no trace, no batch log) plus card, card_busy_s, card_steps, card_peak_kv_blocks; the
# disaggregated one adds ready_s, decode_start_s, decode_card, decode_busy_s, decode_steps,
# decode_peak_kv_blocks
MAX_CARDS: int

# options: card (_Card), n_replicas (int), router (str); optional prefix_caching (bool), shared
def sim_data_parallel(hw: _Hardware, requests: Requests, options: dict[str, object]) -> dict[str, object]: ...

# options: card (_Card), n_prefill, n_decode (ints), router (str), link ((bandwidth, latency_s))
def sim_disaggregated(hw: _Hardware, requests: Requests, options: dict[str, object]) -> dict[str, object]: ...
