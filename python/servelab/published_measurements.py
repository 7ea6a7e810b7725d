"""Published step times of real engines on real GPUs: the numbers behind ``hw_model.MEASURED``.

Plain data (no imports, so :mod:`servelab.hw_model` can read it without a cycle). Each row:
``(model, gpu, tp, batch_size, new_tokens, context_len, time_s, bytes_per_param, source, notes)``
with ``model`` and ``gpu`` the names of :mod:`servelab.hw_model` presets; a uniform step of
``batch_size`` sequences, each ``new_tokens`` new on top of ``context_len`` cached.

Only numbers are taken from the sources; how each became a step time is in its notes:

* a batch-1 decode rate of ``r`` tokens/s is a step of ``1 / r`` seconds;
* a batch-``B`` throughput of ``X`` output tokens/s over ``O`` output tokens after an ``I``-token
  prompt is a decode step of ``B / X`` seconds (``B`` tokens per step) at the mean context
  ``I + O/2``; the prompts' prefill is under 1% of such a run (``I = 128``, ``O = 2048``), so it
  is left in;
* a first-token latency at batch 1 is one prefill step of the prompt.

gpt-fast and torchao's batch-1 runs generate from a prompt of about 5 tokens; their scripts
generate 200 tokens by default, so the context is taken as 100 (the mean over the run).
``bytes_per_param = 1`` marks 8-bit weights (int8 or FP8 weight-only, or TensorRT-LLM's FP8 with
an FP8 KV cache); a GPU ending ``_FP8`` is priced at its FP8 tensor-core peak (W8A8 FP8 runs).

>>> len(ROWS), sorted({r[1] for r in ROWS})
(29, ['A100_80GB', 'H100', 'H100_FP8', 'H200_FP8'])
>>> round(ROWS[0][6] * 1e3, 2)   # Llama-3.1-8B, batch 1, H100, BF16: ms a token
7.88
"""

GPT_FAST = ("gpt-fast README.md, tables 'Benchmarks' and 'Tensor Parallelism' "
            "(github.com/meta-pytorch/gpt-fast, formerly pytorch-labs/gpt-fast, commit 258ae2ec)")
TORCHAO = ("torchao quantization README, tables 'CUDA backend | NVIDIA-H100 GPU' and "
           "'NVIDIA-A100-80GB GPU' (github.com/pytorch/ao, torchao/quantization/README.md, commit fd6e4b1f)")
TRTLLM = ("TensorRT-LLM 'Performance of TensorRT-LLM' (github.com/NVIDIA/TensorRT-LLM, "
          "docs/source/performance.md, commit 138f96d4)")
TRTLLM_H200 = ("TensorRT-LLM H200 launch blog, table 'H200 FP8 Max throughput' (github.com/NVIDIA/TensorRT-LLM, "
               "docs/source/blogs/H200launch.md)")

_A100_330W = "A100 power-limited to 330 W; "
_B1 = "batch 1, 5-token prompt, context ~100; "

ROWS = (
    # --- decode at batch 1, one card ---------------------------------------------------------
    ("LLAMA3_8B", "H100", 1, 1, 1, 100, 1 / 126.90, 2.0, TORCHAO,
     "Llama-3.1-8B (same shape as Llama-3-8B), Base bfloat16, torch.compile; " + _B1 + "126.90 tok/s"),
    ("LLAMA3_8B", "H100", 1, 1, 1, 100, 1 / 178.46, 1.0, TORCHAO,
     "Llama-3.1-8B float8 weight-only (FP8 weights, BF16 activations); " + _B1 + "178.46 tok/s"),
    ("LLAMA3_8B", "H100", 1, 1, 1, 100, 1 / 198.85, 1.0, TORCHAO,
     "Llama-3.1-8B int8 weight-only; " + _B1 + "198.85 tok/s"),
    ("LLAMA3_8B", "A100_80GB", 1, 1, 1, 100, 1 / 95.64, 2.0, TORCHAO,
     "Llama-3-8B Base bfloat16; " + _B1 + "95.64 tok/s"),
    ("LLAMA3_8B", "A100_80GB", 1, 1, 1, 100, 1 / 153.03, 1.0, TORCHAO,
     "Llama-3-8B int8 weight-only; " + _B1 + "153.03 tok/s"),
    ("LLAMA2_7B", "A100_80GB", 1, 1, 1, 100, 1 / 107.38, 2.0, TORCHAO,
     "Llama-2-7B Base bfloat16; " + _B1 + "107.38 tok/s"),
    ("LLAMA2_7B", "A100_80GB", 1, 1, 1, 100, 1 / 104.9, 2.0, GPT_FAST,
     _A100_330W + "Llama-2-7B Base bfloat16; " + _B1 + "104.9 tok/s"),
    ("LLAMA2_7B", "A100_80GB", 1, 1, 1, 100, 1 / 155.58, 1.0, GPT_FAST,
     _A100_330W + "Llama-2-7B int8 weight-only; " + _B1 + "155.58 tok/s"),
    ("LLAMA3_8B", "A100_80GB", 1, 1, 1, 100, 1 / 93.89, 2.0, GPT_FAST,
     _A100_330W + "Llama-3.1-8B Base bfloat16; " + _B1 + "93.89 tok/s"),
    # --- decode at batch 1, tensor parallel --------------------------------------------------
    ("LLAMA2_7B", "A100_80GB", 2, 1, 1, 100, 1 / 168.84, 2.0, GPT_FAST,
     _A100_330W + "bfloat16, 2 GPUs; " + _B1 + "168.84 tok/s"),
    ("LLAMA2_7B", "A100_80GB", 4, 1, 1, 100, 1 / 254.02, 2.0, GPT_FAST,
     _A100_330W + "bfloat16, 4 GPUs; " + _B1 + "254.02 tok/s"),
    ("LLAMA2_7B", "A100_80GB", 8, 1, 1, 100, 1 / 328.43, 2.0, GPT_FAST,
     _A100_330W + "bfloat16, 8 GPUs; " + _B1 + "328.43 tok/s"),
    ("LLAMA2_70B", "A100_80GB", 2, 1, 1, 100, 1 / 21.32, 2.0, GPT_FAST,
     _A100_330W + "bfloat16, 2 GPUs; " + _B1 + "21.32 tok/s"),
    ("LLAMA2_70B", "A100_80GB", 4, 1, 1, 100, 1 / 38.01, 2.0, GPT_FAST,
     _A100_330W + "bfloat16, 4 GPUs; " + _B1 + "38.01 tok/s"),
    ("LLAMA2_70B", "A100_80GB", 8, 1, 1, 100, 1 / 62.50, 2.0, GPT_FAST,
     _A100_330W + "bfloat16, 8 GPUs; " + _B1 + "62.50 tok/s"),
    ("LLAMA3_8B", "A100_80GB", 2, 1, 1, 100, 1 / 149.10, 2.0, GPT_FAST,
     _A100_330W + "Llama-3.1-8B bfloat16, 2 GPUs; " + _B1 + "149.10 tok/s"),
    ("LLAMA3_8B", "A100_80GB", 4, 1, 1, 100, 1 / 217.21, 2.0, GPT_FAST,
     _A100_330W + "Llama-3.1-8B bfloat16, 4 GPUs; " + _B1 + "217.21 tok/s"),
    ("LLAMA3_8B", "A100_80GB", 8, 1, 1, 100, 1 / 276.01, 2.0, GPT_FAST,
     _A100_330W + "Llama-3.1-8B bfloat16, 8 GPUs; " + _B1 + "276.01 tok/s"),
    ("LLAMA3_70B", "A100_80GB", 4, 1, 1, 100, 1 / 37.45, 2.0, GPT_FAST,
     _A100_330W + "Llama-3.1-70B bfloat16, 4 GPUs; " + _B1 + "37.45 tok/s"),
    ("LLAMA3_70B", "A100_80GB", 8, 1, 1, 100, 1 / 58.78, 2.0, GPT_FAST,
     _A100_330W + "Llama-3.1-70B bfloat16, 8 GPUs; " + _B1 + "58.78 tok/s"),
    # --- prefill at batch 1 (first-token latency, TensorRT-LLM v0.5) --------------------------
    ("LLAMA2_7B", "A100_80GB", 1, 1, 2048, 0, 0.133, 2.0, TRTLLM,
     "table 'Low Latency', A100 FP16, LLaMA 7B, input 2048: 133 ms to the first token"),
    ("LLAMA2_7B", "A100_80GB", 1, 1, 128, 0, 0.016, 2.0, TRTLLM,
     "table 'Low Latency', A100 FP16, LLaMA 7B, input 128: 16 ms to the first token"),
    ("LLAMA2_70B", "A100_80GB", 4, 1, 2048, 0, 0.377, 2.0, TRTLLM,
     "table 'Low Latency', A100 FP16, LLaMA 70B, TP 4, input 2048: 377 ms to the first token"),
    ("LLAMA2_70B", "A100_80GB", 4, 1, 128, 0, 0.047, 2.0, TRTLLM,
     "table 'Low Latency', A100 FP16, LLaMA 70B, TP 4, input 128: 47 ms to the first token"),
    ("LLAMA2_7B", "H100_FP8", 1, 1, 2048, 0, 0.036, 1.0, TRTLLM,
     "table 'Low Latency', H100 FP8, LLaMA 7B, input 2048: 36 ms to the first token"),
    ("LLAMA2_70B", "H100_FP8", 4, 1, 2048, 0, 0.109, 1.0, TRTLLM,
     "table 'Low Latency', H100 FP8, LLaMA 70B, TP 4, input 2048: 109 ms to the first token"),
    # --- decode at large batches (throughput tables, input 128, output 2048) ----------------
    ("LLAMA2_7B", "H100_FP8", 1, 112, 1, 1152, 112 / 6818, 1.0, TRTLLM,
     "table 'Peak Throughput' H100 FP8 (v0.6.1), LLaMA 7B, batch 112, 128 in / 2048 out: "
     "6,818 out tok/s, so 112 / 6818 s a decode step at mean context 128 + 1024"),
    ("LLAMA2_7B", "A100_80GB", 1, 60, 1, 1152, 60 / 1928, 2.0, TRTLLM,
     "table 'Peak Throughput' A100 FP16 (v0.6.1), LLaMA 7B, batch 60, 128 in / 2048 out: "
     "1,928 out tok/s, so 60 / 1928 s a decode step at mean context 128 + 1024"),
    ("LLAMA2_13B", "H200_FP8", 1, 128, 1, 1152, 128 / 4750, 1.0, TRTLLM_H200,
     "H200 FP8 (TensorRT-LLM v0.5), llama_13b, batch 128, TP 1, 128 in / 2048 out: 4,750 out tok/s, "
     "so 128 / 4750 s a decode step at mean context 128 + 1024"),
)
