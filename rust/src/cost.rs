//! The paper GPU: a roofline cost for one forward step of a decoder-only transformer
//! (lecture §3.2-§3.5, SPEC.md §2).
//!
//! `time = max(F / (compute_eff * peak_flops), M / (bandwidth_eff * hbm_bandwidth)) + overhead`
//!
//! Counting rules (each one is pinned by a number the lecture prints):
//! * every weight matrix is read once per step, except an untied embedding table, of which only
//!   the looked-up rows are read (decode batch 1 = 6.13 ms on H100);
//! * matmul FLOPs are 2 per weight per token; the LM head runs only for the last token of each
//!   sequence (prefill 2048 = 21.2 us/token);
//! * attention FLOPs are causal: token `i` of a sequence with `ctx` cached tokens attends to
//!   `ctx + i` keys, 4 FLOPs per key per head-dimension (QK^T and PV) (prefill 32K = ~33 us/token);
//! * the step reads the KV cache of every sequence's context and writes the new tokens' KV
//!   (no-GQA batch 32 = 13.12 ms).
//!
//! Norm weights are counted as parameters and bytes but their FLOPs are ignored, as are
//! softmax, rotary embeddings and activations: all are O(d) per token next to O(d^2) matmuls.

use crate::error::{CoreError, CoreResult};

/// Largest accepted model dimension. Keeps every integer product of the parameter count inside
/// i128 (four factors of 2^24 and a small constant), so counts are exact and never overflow.
pub const MAX_DIM: i64 = 1 << 24;
/// Largest accepted token count for one sequence in one step (new or cached).
pub const MAX_TOKENS: i64 = 1 << 40;
/// Largest total of new tokens in one step (2^53): the step's token and sequence counts are
/// summed as integers and priced as `f64`, so they must stay exact in both. Past it a step is
/// refused with an error naming the value, never wrapped around.
pub const MAX_STEP_TOKENS: i64 = 1 << 53;

/// Shape of a decoder-only transformer (Llama family: GQA attention, SwiGLU MLP, RMSNorm).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub n_layers: i64,
    pub d_model: i64,
    pub n_heads: i64,
    pub n_kv_heads: i64,
    pub d_head: i64,
    pub d_ff: i64,
    pub vocab_size: i64,
    pub tie_embeddings: bool,
    pub bytes_per_param: f64,
}

/// What the lecture needs of a GPU: peak dense FLOP/s, HBM bandwidth (B/s), memory (B).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    pub peak_flops: f64,
    pub hbm_bandwidth: f64,
    pub memory_bytes: f64,
}

/// The lecture's three discounts (§0.6, §3.2): 70% of peak compute, 80% of peak bandwidth,
/// and a fixed 0.5 ms per forward for launch and scheduling overhead.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    pub compute: f64,
    pub bandwidth: f64,
    pub overhead_s: f64,
}

impl Default for Efficiency {
    fn default() -> Self {
        Efficiency { compute: 0.70, bandwidth: 0.80, overhead_s: 0.5e-3 }
    }
}

/// The price of one forward step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCost {
    pub time_s: f64,
    pub flops: f64,
    pub bytes_moved: f64,
    pub weight_bytes: f64,
    pub kv_bytes: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    /// true when `compute_s > memory_s` (a tie counts as memory-bound).
    pub compute_bound: bool,
    /// achieved FLOP/s over peak FLOP/s, over the whole step time (overhead included).
    pub mfu: f64,
    /// FLOPs per byte moved.
    pub intensity: f64,
    pub n_tokens: i64,
    pub n_seqs: i64,
}

fn check_dim(field: &str, value: i64) -> CoreResult<()> {
    if value < 1 || value > MAX_DIM {
        return Err(CoreError::invalid(format!(
            "{field} must be a positive integer at most {MAX_DIM}, got {value}"
        )));
    }
    Ok(())
}

fn check_positive_finite(field: &str, value: f64) -> CoreResult<()> {
    if !(value.is_finite() && value > 0.0) {
        return Err(CoreError::invalid(format!(
            "{field} must be a positive finite number, got {}",
            fmt_f64(value)
        )));
    }
    Ok(())
}

/// Formats a float the way Python's `repr` does for the values that reach error messages,
/// so the Rust and the pure-Python paths print identical messages.
pub fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else if v == v.trunc() && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        // Rust prints 1e20 as "1e20" and 1e-7 as "1e-7"; Python prints "1e+20" and "1e-07".
        let s = format!("{v:?}");
        match s.split_once('e') {
            Some((mant, exp)) => {
                let e: i32 = exp.parse().unwrap_or(0);
                format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
            }
            None => s,
        }
    }
}

impl ModelSpec {
    pub fn validate(&self) -> CoreResult<()> {
        check_dim("n_layers", self.n_layers)?;
        check_dim("d_model", self.d_model)?;
        check_dim("n_heads", self.n_heads)?;
        check_dim("n_kv_heads", self.n_kv_heads)?;
        check_dim("d_head", self.d_head)?;
        check_dim("d_ff", self.d_ff)?;
        check_dim("vocab_size", self.vocab_size)?;
        if self.n_heads % self.n_kv_heads != 0 {
            return Err(CoreError::invalid(format!(
                "n_heads must be a multiple of n_kv_heads, got n_heads={} and n_kv_heads={}",
                self.n_heads, self.n_kv_heads
            )));
        }
        check_positive_finite("bytes_per_param", self.bytes_per_param)
    }

    /// Weights of one layer's matmuls: Wq, Wk, Wv, Wo (GQA: K and V have n_kv_heads heads)
    /// and the three SwiGLU matrices (gate, up, down).
    fn layer_matmul_params(&self) -> i128 {
        let (d, q, kv, ff) = (
            self.d_model as i128,
            (self.n_heads * self.d_head) as i128,
            (self.n_kv_heads * self.d_head) as i128,
            self.d_ff as i128,
        );
        d * q + 2 * d * kv + q * d + 3 * d * ff
    }

    fn embedding_params(&self) -> i128 {
        self.vocab_size as i128 * self.d_model as i128
    }

    /// Total parameters: layers (matmuls + two RMSNorm gains), final norm, embedding table,
    /// LM head (absent when tied to the embedding table). Llama-3-8B: 8,030,261,248.
    pub fn param_count(&self) -> i128 {
        let d = self.d_model as i128;
        let layers = self.n_layers as i128 * (self.layer_matmul_params() + 2 * d);
        let head = if self.tie_embeddings { 0 } else { self.embedding_params() };
        layers + d + self.embedding_params() + head
    }

    pub fn weight_bytes(&self) -> f64 {
        self.param_count() as f64 * self.bytes_per_param
    }

    /// K and V, every layer, every KV head (§2.4). Llama-3-8B in BF16: 131072 B = 128 KiB.
    pub fn kv_bytes_per_token(&self) -> f64 {
        // i128: three dimensions of up to 2^24 each overflow i64 (2^73)
        (2 * self.n_layers as i128 * self.n_kv_heads as i128 * self.d_head as i128) as f64 * self.bytes_per_param
    }

    /// Parameters a step streams from HBM in full: all but an untied embedding table.
    fn streamed_params(&self) -> i128 {
        if self.tie_embeddings {
            self.param_count()
        } else {
            self.param_count() - self.embedding_params()
        }
    }
}

impl GpuSpec {
    pub fn validate(&self) -> CoreResult<()> {
        check_positive_finite("peak_flops", self.peak_flops)?;
        check_positive_finite("hbm_bandwidth", self.hbm_bandwidth)?;
        check_positive_finite("memory_bytes", self.memory_bytes)
    }

    /// FLOP per byte where the roofline bends (§3.2). H100: 295, A100: 153.
    pub fn ridge_point(&self) -> f64 {
        self.peak_flops / self.hbm_bandwidth
    }
}

impl Efficiency {
    pub fn validate(&self) -> CoreResult<()> {
        for (field, v) in [("compute", self.compute), ("bandwidth", self.bandwidth)] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(CoreError::invalid(format!(
                    "efficiency.{field} must be in (0, 1], got {}",
                    fmt_f64(v)
                )));
            }
        }
        if !(self.overhead_s.is_finite() && self.overhead_s >= 0.0) {
            return Err(CoreError::invalid(format!(
                "efficiency.overhead_s must be a finite number >= 0, got {}",
                fmt_f64(self.overhead_s)
            )));
        }
        Ok(())
    }
}

fn check_mem_util(mem_util: f64) -> CoreResult<()> {
    if !(mem_util > 0.0 && mem_util <= 1.0) {
        return Err(CoreError::invalid(format!(
            "mem_util must be in (0, 1], got {}",
            fmt_f64(mem_util)
        )));
    }
    Ok(())
}

/// Tokens of KV cache that fit beside the weights (§3.5): `floor((memory * mem_util - weights)
/// / kv_per_token)`, and 0 (never negative) when the weights alone do not fit (exercise 1d).
pub fn kv_capacity_tokens(model: &ModelSpec, gpu: &GpuSpec, mem_util: f64) -> CoreResult<i64> {
    model.validate()?;
    gpu.validate()?;
    check_mem_util(mem_util)?;
    let free = gpu.memory_bytes * mem_util - model.weight_bytes();
    if free <= 0.0 {
        return Ok(0);
    }
    let tokens = (free / model.kv_bytes_per_token()).floor();
    // `as i64` would saturate silently: a capacity past 2^63 is an error, not a wrong number
    if tokens >= 9.223_372_036_854_775_808e18 {
        return Err(CoreError::invalid(format!(
            "memory_bytes={} gives a KV capacity of {} tokens, past the 64-bit limit {}",
            fmt_f64(gpu.memory_bytes),
            fmt_f64(tokens),
            i64::MAX
        )));
    }
    Ok(tokens as i64)
}

/// Largest batch whose sequences of `context_len` tokens all fit in the KV capacity.
pub fn max_batch(model: &ModelSpec, gpu: &GpuSpec, context_len: i64, mem_util: f64) -> CoreResult<i64> {
    if !(1..=MAX_TOKENS).contains(&context_len) {
        return Err(CoreError::invalid(format!(
            "context_len must be an integer in [1, {MAX_TOKENS}], got {context_len}"
        )));
    }
    Ok(kv_capacity_tokens(model, gpu, mem_util)? / context_len)
}

/// One group of identical sequences in a step: `count` sequences, each computing `new_tokens`
/// tokens on top of `context_len` tokens already in its KV cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeqGroup {
    pub new_tokens: i64,
    pub context_len: i64,
    pub count: i64,
}

impl SeqGroup {
    pub fn one(new_tokens: i64, context_len: i64) -> Self {
        SeqGroup { new_tokens, context_len, count: 1 }
    }
}

/// `tokens + new_tokens * count`, or an error naming the values when the step's total would pass
/// [`MAX_STEP_TOKENS`].
fn add_step_tokens(tokens: i64, g: &SeqGroup) -> CoreResult<i64> {
    let group = g.new_tokens as i128 * g.count as i128;
    let total = tokens as i128 + group;
    if total <= MAX_STEP_TOKENS as i128 {
        return Ok(total as i64);
    }
    Err(CoreError::invalid(if g.count == 1 {
        format!(
            "new_tokens must keep the step's total at most {MAX_STEP_TOKENS} new tokens, got {} on top of {tokens}",
            g.new_tokens
        )
    } else {
        format!(
            "batch_size x new_tokens must be at most {MAX_STEP_TOKENS} new tokens in one step, got {} x {} = {group}",
            g.count, g.new_tokens
        )
    }))
}

fn check_group(g: &SeqGroup) -> CoreResult<()> {
    if !(1..=MAX_TOKENS).contains(&g.new_tokens) {
        return Err(CoreError::invalid(format!(
            "new_tokens must be an integer in [1, {MAX_TOKENS}], got {}",
            g.new_tokens
        )));
    }
    if !(0..=MAX_TOKENS).contains(&g.context_len) {
        return Err(CoreError::invalid(format!(
            "context_len must be an integer in [0, {MAX_TOKENS}], got {}",
            g.context_len
        )));
    }
    if !(1..=MAX_TOKENS).contains(&g.count) {
        return Err(CoreError::invalid(format!(
            "batch_size must be an integer in [1, {MAX_TOKENS}], got {}",
            g.count
        )));
    }
    Ok(())
}

/// Validates all three specs once; the hot loops below then skip it.
pub fn validate_all(model: &ModelSpec, gpu: &GpuSpec, eff: &Efficiency) -> CoreResult<()> {
    model.validate()?;
    gpu.validate()?;
    eff.validate()
}

/// Per-model constants of the step cost, computed once per sweep.
#[derive(Debug, Clone)]
pub struct Pricer {
    matmul_flops_per_token: f64,
    lm_head_flops_per_seq: f64,
    attn_flops_per_key: f64,
    streamed_weight_bytes: f64,
    embed_row_bytes: f64,
    kv_per_token: f64,
    compute_rate: f64,
    memory_rate: f64,
    peak_flops: f64,
    overhead_s: f64,
    // seconds a step costs per new token and per sequence beyond the roofline (a serving
    // stack's all-reduce bytes, per-sequence CPU work); zero on the lecture's paper GPU, and
    // then `finish` adds exact zeros, so every lecture number stays bit for bit
    per_token_s: f64,
    per_seq_s: f64,
}

impl Pricer {
    pub fn new(model: &ModelSpec, gpu: &GpuSpec, eff: &Efficiency) -> CoreResult<Self> {
        validate_all(model, gpu, eff)?;
        let layers = model.n_layers as f64;
        Ok(Pricer {
            matmul_flops_per_token: 2.0 * layers * model.layer_matmul_params() as f64,
            lm_head_flops_per_seq: 2.0 * model.embedding_params() as f64,
            attn_flops_per_key: 4.0 * layers * (model.n_heads * model.d_head) as f64,
            streamed_weight_bytes: model.streamed_params() as f64 * model.bytes_per_param,
            embed_row_bytes: model.d_model as f64 * model.bytes_per_param,
            kv_per_token: model.kv_bytes_per_token(),
            compute_rate: eff.compute * gpu.peak_flops,
            memory_rate: eff.bandwidth * gpu.hbm_bandwidth,
            peak_flops: gpu.peak_flops,
            overhead_s: eff.overhead_s,
            per_token_s: 0.0,
            per_seq_s: 0.0,
        })
    }

    /// The same pricer with a linear extra per step: `per_token_s` seconds for each new token
    /// and `per_seq_s` for each sequence, added after the roofline's `max` (§8.3: what a real
    /// serving stack adds to the paper GPU, fitted by `servelab.validation`). Each must be a
    /// finite number >= 0.
    pub fn with_step_extra(mut self, per_token_s: f64, per_seq_s: f64) -> CoreResult<Self> {
        for (field, v) in [("per_token_s", per_token_s), ("per_seq_s", per_seq_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(CoreError::invalid(format!("{field} must be a finite number >= 0, got {}", fmt_f64(v))));
            }
        }
        self.per_token_s = per_token_s;
        self.per_seq_s = per_seq_s;
        Ok(self)
    }

    /// Prices a step given as groups of identical sequences. `label(k)` names group `k` in an
    /// error message (e.g. `batch[3].`); it is only called on bad input, so the hot loop never
    /// allocates.
    pub fn price<I, L>(&self, groups: I, label: L) -> CoreResult<StepCost>
    where
        I: IntoIterator<Item = SeqGroup>,
        L: Fn(usize) -> String,
    {
        let (mut tokens, mut seqs) = (0i64, 0i64);
        let (mut keys, mut ctx_tokens) = (0f64, 0f64);
        for (k, g) in groups.into_iter().enumerate() {
            check_group(&g).map_err(|e| e.prefixed(&label(k)))?;
            let (n, c, cnt) = (g.new_tokens as f64, g.context_len as f64, g.count as f64);
            // checked: 2^23 sequences of 2^40 tokens would wrap i64
            tokens = add_step_tokens(tokens, &g).map_err(|e| e.prefixed(&label(k)))?;
            seqs += g.count; // <= tokens, so it cannot overflow either
            // token i (1-based) of this step attends to c + i keys: sum = n*c + n(n+1)/2
            keys += cnt * (n * c + n * (n + 1.0) / 2.0);
            ctx_tokens += cnt * c;
        }
        if seqs == 0 {
            return Err(CoreError::invalid("batch must hold at least one sequence, got an empty batch"));
        }
        Ok(self.finish(tokens, seqs, keys, ctx_tokens))
    }

    /// Prices a step from its totals, for simulators that keep them as they go: `tokens` new
    /// tokens over `seqs` sequences, `keys` attention (query, key) pairs (`sum n*c + n(n+1)/2`)
    /// and `ctx_tokens` cached tokens read. Unchecked: the caller guarantees `tokens >= 1` and
    /// `seqs >= 1`. Bit for bit the same arithmetic as [`Pricer::price`] when the totals are
    /// exact (integers below 2^53). Inlined: a simulator that reads only `time_s` (a
    /// speculative step prices the draft's steps this way) then skips the other divisions.
    #[inline]
    pub fn price_totals(&self, tokens: i64, seqs: i64, keys: f64, ctx_tokens: f64) -> StepCost {
        self.finish(tokens, seqs, keys, ctx_tokens)
    }

    /// Peak dense FLOP/s of the GPU this pricer was built for (MFU's denominator).
    pub fn peak_flops(&self) -> f64 {
        self.peak_flops
    }

    #[inline]
    fn finish(&self, tokens: i64, seqs: i64, keys: f64, ctx_tokens: f64) -> StepCost {
        let t = tokens as f64;
        let flops = self.matmul_flops_per_token * t
            + self.lm_head_flops_per_seq * seqs as f64
            + self.attn_flops_per_key * keys;
        let kv_bytes = self.kv_per_token * (ctx_tokens + t);
        let weight_bytes = self.streamed_weight_bytes + self.embed_row_bytes * t;
        let bytes_moved = weight_bytes + kv_bytes;
        let compute_s = flops / self.compute_rate;
        let memory_s = bytes_moved / self.memory_rate;
        let time_s = compute_s.max(memory_s) + self.overhead_s + self.per_token_s * t + self.per_seq_s * seqs as f64;
        StepCost {
            time_s,
            flops,
            bytes_moved,
            weight_bytes,
            kv_bytes,
            compute_s,
            memory_s,
            compute_bound: compute_s > memory_s,
            mfu: flops / (time_s * self.peak_flops),
            intensity: flops / bytes_moved,
            n_tokens: tokens,
            n_seqs: seqs,
        }
    }
}

/// Step cost of one batch of `(new_tokens, context_len)` sequences.
pub fn step_cost(model: &ModelSpec, gpu: &GpuSpec, eff: &Efficiency, batch: &[(i64, i64)]) -> CoreResult<StepCost> {
    let pricer = Pricer::new(model, gpu, eff)?;
    pricer.price(batch.iter().map(|&(n, c)| SeqGroup::one(n, c)), |i| format!("batch[{i}]."))
}

/// Step cost of one batch given as two columns (`new_tokens[i]`, `context_len[i]` of sequence
/// `i`): [`step_cost`] without building pairs, for batches of millions of sequences. Same checks
/// and messages (`batch[i].new_tokens ...`).
pub fn step_cost_columns(
    model: &ModelSpec,
    gpu: &GpuSpec,
    eff: &Efficiency,
    new_tokens: &[i64],
    context_len: &[i64],
) -> CoreResult<StepCost> {
    if new_tokens.len() != context_len.len() {
        return Err(CoreError::invalid(format!(
            "new_tokens and context_len must have the same length, got {} and {}",
            new_tokens.len(),
            context_len.len()
        )));
    }
    let pricer = Pricer::new(model, gpu, eff)?;
    pricer.price(
        new_tokens.iter().zip(context_len).map(|(&n, &c)| SeqGroup::one(n, c)),
        |i| format!("batch[{i}]."),
    )
}

/// Column-wise results of many steps, for sweeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepCosts {
    pub time_s: Vec<f64>,
    pub flops: Vec<f64>,
    pub bytes_moved: Vec<f64>,
    pub weight_bytes: Vec<f64>,
    pub kv_bytes: Vec<f64>,
    pub compute_s: Vec<f64>,
    pub memory_s: Vec<f64>,
    pub compute_bound: Vec<bool>,
    pub mfu: Vec<f64>,
    pub intensity: Vec<f64>,
}

impl StepCosts {
    /// The names of the columns, in order (those of [`StepCost`] but the two counts).
    pub const NAMES: [&'static str; 10] = [
        "time_s", "flops", "bytes_moved", "weight_bytes", "kv_bytes", "compute_s", "memory_s", "compute_bound",
        "mfu", "intensity",
    ];

    fn with_capacity(n: usize) -> Self {
        StepCosts {
            time_s: Vec::with_capacity(n),
            flops: Vec::with_capacity(n),
            bytes_moved: Vec::with_capacity(n),
            weight_bytes: Vec::with_capacity(n),
            kv_bytes: Vec::with_capacity(n),
            compute_s: Vec::with_capacity(n),
            memory_s: Vec::with_capacity(n),
            compute_bound: Vec::with_capacity(n),
            mfu: Vec::with_capacity(n),
            intensity: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, c: StepCost) {
        self.time_s.push(c.time_s);
        self.flops.push(c.flops);
        self.bytes_moved.push(c.bytes_moved);
        self.weight_bytes.push(c.weight_bytes);
        self.kv_bytes.push(c.kv_bytes);
        self.compute_s.push(c.compute_s);
        self.memory_s.push(c.memory_s);
        self.compute_bound.push(c.compute_bound);
        self.mfu.push(c.mfu);
        self.intensity.push(c.intensity);
    }
}

/// Many steps at once, in compressed form: step `s` holds sequences `offsets[s] .. offsets[s+1]`
/// of the `new_tokens` / `context_len` columns. Each step is handed to `each(step, cost)` in
/// order (to write into the caller's arrays, say); on an error, those before it have been.
pub fn step_cost_many_each<F: FnMut(usize, StepCost)>(
    model: &ModelSpec,
    gpu: &GpuSpec,
    eff: &Efficiency,
    new_tokens: &[i64],
    context_len: &[i64],
    offsets: &[i64],
    mut each: F,
) -> CoreResult<()> {
    let pricer = Pricer::new(model, gpu, eff)?;
    if new_tokens.len() != context_len.len() {
        return Err(CoreError::invalid(format!(
            "new_tokens and context_len must have the same length, got {} and {}",
            new_tokens.len(),
            context_len.len()
        )));
    }
    match (offsets.first(), offsets.last()) {
        (Some(&0), Some(&last)) if last == new_tokens.len() as i64 => {}
        (Some(&first), Some(&last)) => {
            return Err(CoreError::invalid(format!(
                "offsets must start at 0 and end at len(new_tokens)={}, got offsets[0]={first} and offsets[-1]={last}",
                new_tokens.len()
            )))
        }
        _ => {
            return Err(CoreError::invalid(format!(
                "offsets must start at 0 and end at len(new_tokens)={}, got an empty array",
                new_tokens.len()
            )))
        }
    }
    let n_steps = offsets.len() - 1;
    for s in 0..n_steps {
        let (lo, hi) = (offsets[s], offsets[s + 1]);
        if hi <= lo || hi > new_tokens.len() as i64 {
            // strictly increasing offsets inside [0, len] keep every slice below in bounds
            return Err(CoreError::invalid(format!(
                "step {s} must hold at least one sequence within the columns, got offsets[{s}]={lo} \
                 and offsets[{}]={hi} for {} sequences",
                s + 1,
                new_tokens.len()
            )));
        }
        let (lo, hi) = (lo as usize, hi as usize);
        let cost = pricer.price(
            new_tokens[lo..hi].iter().zip(&context_len[lo..hi]).map(|(&n, &c)| SeqGroup::one(n, c)),
            |k| format!("new_tokens/context_len[{}]: ", lo + k),
        )?;
        each(s, cost);
    }
    Ok(())
}

/// Many uniform steps: step `s` is `batch_size[s]` identical sequences of
/// `(new_tokens[s], context_len[s])`. The form decode sweeps take.
pub fn step_cost_uniform_many(
    model: &ModelSpec,
    gpu: &GpuSpec,
    eff: &Efficiency,
    batch_size: &[i64],
    new_tokens: &[i64],
    context_len: &[i64],
) -> CoreResult<StepCosts> {
    let pricer = Pricer::new(model, gpu, eff)?;
    let n = batch_size.len();
    if new_tokens.len() != n || context_len.len() != n {
        return Err(CoreError::invalid(format!(
            "batch_size, new_tokens and context_len must have the same length, got {}, {} and {}",
            n,
            new_tokens.len(),
            context_len.len()
        )));
    }
    let mut out = StepCosts::with_capacity(n);
    for s in 0..n {
        let g = SeqGroup { new_tokens: new_tokens[s], context_len: context_len[s], count: batch_size[s] };
        out.push(pricer.price(std::iter::once(g), |_| format!("step {s}: "))?);
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn llama3_8b() -> ModelSpec {
        ModelSpec {
            n_layers: 32,
            d_model: 4096,
            n_heads: 32,
            n_kv_heads: 8,
            d_head: 128,
            d_ff: 14336,
            vocab_size: 128256,
            tie_embeddings: false,
            bytes_per_param: 2.0,
        }
    }

    pub(crate) fn h100() -> GpuSpec {
        GpuSpec { peak_flops: 989e12, hbm_bandwidth: 3.35e12, memory_bytes: 80e9 }
    }

    fn a100() -> GpuSpec {
        GpuSpec { peak_flops: 312e12, hbm_bandwidth: 2.039e12, memory_bytes: 80e9 }
    }

    fn decode(model: &ModelSpec, gpu: &GpuSpec, b: i64, ctx: i64) -> StepCost {
        let batch = vec![(1, ctx); b as usize];
        step_cost(model, gpu, &Efficiency::default(), &batch).unwrap()
    }

    /// The error of `step_cost_many_each` on Llama-3-8B / H100, if any.
    fn many(new_tokens: &[i64], context_len: &[i64], offsets: &[i64]) -> CoreResult<()> {
        step_cost_many_each(&llama3_8b(), &h100(), &Efficiency::default(), new_tokens, context_len, offsets, |_, _| {})
    }

    fn ms(x: f64) -> f64 {
        (x * 1e5).round() / 100.0
    }

    #[test]
    fn llama3_8b_ledger() {
        let m = llama3_8b();
        assert_eq!(m.param_count(), 8_030_261_248);
        assert_eq!(m.kv_bytes_per_token(), 131072.0);
        assert_eq!(kv_capacity_tokens(&m, &h100(), 0.9).unwrap(), 426_784);
        assert_eq!(max_batch(&m, &h100(), 1024, 0.9).unwrap(), 416);
    }

    #[test]
    fn decode_batch1_matches_lecture() {
        assert_eq!(ms(decode(&llama3_8b(), &h100(), 1, 512).time_s), 6.13);
        assert_eq!(ms(decode(&llama3_8b(), &a100(), 1, 512).time_s), 9.74);
        assert_eq!(ms(decode(&llama3_8b(), &h100(), 1, 1024).time_s), 6.15);
    }

    #[test]
    fn no_gqa_batch32() {
        let mut m = llama3_8b();
        assert_eq!(ms(decode(&m, &h100(), 32, 1024).time_s), 7.70);
        m.n_kv_heads = 32;
        assert_eq!(ms(decode(&m, &h100(), 32, 1024).time_s), 13.12);
        assert_eq!(kv_capacity_tokens(&m, &h100(), 0.9).unwrap(), 103_624);
    }

    #[test]
    fn step_extra_adds_per_token_and_per_sequence() {
        let plain = Pricer::new(&llama3_8b(), &h100(), &Efficiency::default()).unwrap();
        let extra = plain.clone().with_step_extra(1e-6, 2e-5).unwrap();
        let groups = || [SeqGroup { new_tokens: 1, context_len: 512, count: 8 }, SeqGroup::one(100, 0)];
        let (a, b) = (plain.price(groups(), |_| String::new()).unwrap(), extra.price(groups(), |_| String::new()).unwrap());
        assert!((b.time_s - a.time_s - (108.0 * 1e-6 + 9.0 * 2e-5)).abs() < 1e-15);
        // zeros change nothing, bit for bit (the lecture's numbers)
        let zero = plain.clone().with_step_extra(0.0, 0.0).unwrap();
        assert_eq!(zero.price(groups(), |_| String::new()).unwrap(), a);
        assert!(plain.clone().with_step_extra(-1.0, 0.0).is_err());
        assert!(plain.with_step_extra(0.0, f64::NAN).is_err());
    }

    #[test]
    fn a100_prefill_crossover() {
        let p = |t| step_cost(&llama3_8b(), &a100(), &Efficiency::default(), &[(t, 0)]).unwrap();
        assert!(!p(142).compute_bound);
        assert!(p(145).compute_bound);
    }

    #[test]
    fn batch_equals_groups() {
        let pricer = Pricer::new(&llama3_8b(), &h100(), &Efficiency::default()).unwrap();
        let grouped = pricer
            .price([SeqGroup { new_tokens: 3, context_len: 100, count: 5 }], |_| String::new())
            .unwrap();
        let flat = step_cost(&llama3_8b(), &h100(), &Efficiency::default(), &[(3, 100); 5]).unwrap();
        assert!((grouped.time_s - flat.time_s).abs() <= 1e-12 * flat.time_s);
        assert_eq!(grouped.n_tokens, 15);
    }

    #[test]
    fn weights_alone_too_big_gives_zero_capacity() {
        let m70 = ModelSpec { n_layers: 80, d_model: 8192, n_heads: 64, d_ff: 28672, ..llama3_8b() };
        assert_eq!(m70.param_count(), 70_553_706_496);
        assert_eq!(kv_capacity_tokens(&m70, &h100(), 0.9).unwrap(), 0);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut m = llama3_8b();
        m.n_kv_heads = 7;
        let e = step_cost(&m, &h100(), &Efficiency::default(), &[(1, 0)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "n_heads must be a multiple of n_kv_heads, got n_heads=32 and n_kv_heads=7"
        );
        let e = step_cost(&llama3_8b(), &h100(), &Efficiency::default(), &[]).unwrap_err();
        assert!(e.to_string().contains("empty batch"));
        let e = step_cost(&llama3_8b(), &h100(), &Efficiency::default(), &[(1, 0), (-2, 0)]).unwrap_err();
        assert_eq!(e.to_string(), format!("batch[1].new_tokens must be an integer in [1, {MAX_TOKENS}], got -2"));
        let e = kv_capacity_tokens(&llama3_8b(), &h100(), 1.5).unwrap_err();
        assert_eq!(e.to_string(), "mem_util must be in (0, 1], got 1.5");
        let gpu = GpuSpec { peak_flops: f64::NAN, ..h100() };
        let e = step_cost(&llama3_8b(), &gpu, &Efficiency::default(), &[(1, 0)]).unwrap_err();
        assert_eq!(e.to_string(), "peak_flops must be a positive finite number, got nan");
        let e = many(&[1], &[0], &[0, 2]).unwrap_err();
        assert!(e.to_string().starts_with("offsets must"));
        let e = many(&[1, 1], &[0, 0], &[0, 5, 2]).unwrap_err();
        assert!(e.to_string().starts_with("step 0 must hold"), "{e}");
    }

    #[test]
    fn totals_past_the_limit_are_errors_not_wrapped() {
        let (m, g, e) = (llama3_8b(), h100(), Efficiency::default());
        // a sweep that once wrapped: 2^32 sequences of 2^31 new tokens wrapped to weight_bytes = -7.6e22
        let err = step_cost_uniform_many(&m, &g, &e, &[1 << 32], &[1 << 31], &[0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "step 0: batch_size x new_tokens must be at most {MAX_STEP_TOKENS} new tokens in one step, \
                 got 4294967296 x 2147483648 = 9223372036854775808"
            )
        );
        // 2^13 sequences of 2^40 tokens reach the limit exactly; one more token passes it
        let mut batch = vec![(MAX_TOKENS, 0); 1 << 13];
        let at = step_cost(&m, &g, &e, &batch).unwrap();
        assert_eq!(at.n_tokens, MAX_STEP_TOKENS);
        assert!(at.weight_bytes > 0.0 && at.time_s.is_finite());
        batch.push((1, 0));
        let err = step_cost(&m, &g, &e, &batch).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("batch[8192].new_tokens must keep the step's total at most {MAX_STEP_TOKENS} new tokens, got 1 on top of {MAX_STEP_TOKENS}")
        );
        let cols = step_cost_columns(&m, &g, &e, &[1, MAX_TOKENS], &[0, 0]).unwrap();
        assert_eq!(cols.n_tokens, MAX_TOKENS + 1);
    }

    #[test]
    fn largest_dimensions_do_not_wrap() {
        let big = 1 << 24;
        let m = ModelSpec { n_layers: big, n_heads: big, n_kv_heads: big, d_head: big, ..llama3_8b() };
        assert_eq!(m.kv_bytes_per_token(), 2.0f64.powi(73) * 2.0);
        let e = kv_capacity_tokens(&llama3_8b(), &GpuSpec { memory_bytes: 1e300, ..h100() }, 0.9).unwrap_err();
        assert!(e.to_string().starts_with("memory_bytes=1e+300 gives a KV capacity of"), "{e}");
    }

    #[test]
    fn offsets_errors_show_the_offsets() {
        let err = many(&[1], &[0], &[0, 5]).unwrap_err();
        assert_eq!(err.to_string(), "offsets must start at 0 and end at len(new_tokens)=1, got offsets[0]=0 and offsets[-1]=5");
        let err = many(&[1], &[0], &[]).unwrap_err();
        assert_eq!(err.to_string(), "offsets must start at 0 and end at len(new_tokens)=1, got an empty array");
    }

    #[test]
    fn float_formatting_matches_python_repr() {
        assert_eq!(fmt_f64(1.5), "1.5");
        assert_eq!(fmt_f64(2.0), "2.0");
        assert_eq!(fmt_f64(-0.25), "-0.25");
        assert_eq!(fmt_f64(1e20), "1e+20");
        assert_eq!(fmt_f64(1e-7), "1e-07");
    }
}
