"""Benchmarks of a training step: :class:`solutions.Transformer` as the trainer runs it (fused
attention, packed rows) against the same model on the padded batch, with separate q/k/v
projections, and against ``torch.nn.Transformer``, taking turns (:func:`bench_training_step`),
and on CUDA the paper's base model in bf16 with its model-FLOPs utilisation
(:func:`bench_base_mfu`). :mod:`solutions.app.bench` runs them and prints the table.

Paper: section 3 (the model), 5.2 (hardware and schedule: "about 0.4 seconds" per base step
on 8 P100 GPUs).
"""
import statistics
import time

import torch
import torch.nn.functional as F

from ..configuration import PAPER_CONFIGS
from ..fused import use_fast_dropout
from ..masking import decoder_mask, padding_mask
from ..model import count_parameters
from ..packing import packed_logits
from .bench_setup import TorchTransformerBaseline, bench_clock, bench_config, random_batch, sync_device

__all__ = ["bench_training_step", "bench_base_mfu", "BASE_BATCH"]

# The base model's MFU batch on CUDA: sentence pairs, tokens per side.
BASE_BATCH = (256, 128)

# Dense bf16 peak FLOP/s by GPU name (vendor data sheets, without sparsity).
_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12,
              "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


def bench_training_step(d_model=256, num_heads=8, num_layers=3, d_ff=1024, batch=32, src_len=32, tgt_len=32,
                        vocab=2000, dropout=0.1, repeats=10, warmup=2, device="cpu", bf16=False, clock="wall"):
    """Training-step times of four models, interleaved: ours as the trainer runs it (fused,
    on packed rows), ours fused on the padded batch, ours with separate q/k/v projections
    (padded), and ``torch.nn.Transformer``.

    All four have the same sizes, initial weights where they share a layout (ours),
    batch, masks, loss (label smoothing 0.1, padding ignored) and optimizer (Adam); every
    repetition runs one step of each, in rotating order, so all see the same machine load.
    ``ours`` computes the position-wise layers and the generator on the real tokens only
    (:func:`solutions.packing.packed_logits`); the others compute every padded position,
    ``torch.nn.Transformer`` as its users call it.

    Returns:
        A dict with the median step time (s) and training tokens per second of each
        (``ours``: fused on packed rows, ``padded``: fused on the padded batch, ``separate``,
        ``torch``), ``ratio`` = the median of the per-repetition ``torch / ours`` times
        (> 1 = ours is faster), ``unpadding_ratio`` = the median of ``padded / ours`` (> 1 =
        leaving the padding out helps), ``packing_ratio`` = the median of ``separate / padded``
        (> 1 = packing the q/k/v projections helps), the batch's padding share
        (``padding``), and the sizes. Tokens = non-padding source + target tokens of the batch.
    """
    device = torch.device(device)
    now = bench_clock(clock, device)

    def ours(fused):
        torch.manual_seed(0)
        # The fast path (SDPA, packed projections, FastDropout), or the same with chapter 5's separate projections.
        attention = "fused" if fused else "readable"
        model = bench_config(d_model, num_heads, num_layers, d_ff, dropout, attention).build(vocab, vocab)
        return model if fused else use_fast_dropout(model.set_fused(True))

    torch.manual_seed(0)
    theirs = TorchTransformerBaseline(vocab, vocab, d_model, num_heads, num_layers, num_layers, d_ff, dropout)
    models = {"ours": ours(True), "padded": ours(True), "separate": ours(False), "torch": theirs}
    models = {name: model.to(device).train() for name, model in models.items()}
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
                  for name, m in models.items()}
    src, tgt, labels = random_batch(batch, src_len, tgt_len, vocab, device, torch.Generator().manual_seed(1))
    src_mask, tgt_mask = padding_mask(src), decoder_mask(tgt)  # True = may attend
    src_pad, tgt_pad = src == 0, tgt == 0  # True = padding (PyTorch's convention)

    def step(name):
        model, optimizer = models[name], optimizers[name]
        targets = labels.reshape(-1)  # (B*T,)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            if name == "ours":  # the rows of real tokens only: (M, V) for the M labels that are not padding
                logits, targets = packed_logits(model, src, tgt, labels)
            elif name == "torch":
                logits = model(src, tgt, src_pad, tgt_pad)  # (B, T, V)
            else:
                logits = model(src, tgt, src_mask, tgt_mask)  # (B, T, V)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets, ignore_index=0, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    names = list(models)
    times = {name: [] for name in names}
    for repeat in range(warmup + repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:  # rotate who goes first
            sync_device(device)
            start = now()
            step(name)
            sync_device(device)
            if repeat >= warmup:
                times[name].append(now() - start)
    tokens = int((tgt != 0).sum()) + int((src != 0).sum())
    result = {}
    for name in names:
        result[f"{name}_s"] = statistics.median(times[name])
        result[f"{name}_tokens_per_s"] = tokens / result[f"{name}_s"]

    def ratio(slower, faster):
        return statistics.median([s / f for f, s in zip(times[faster], times[slower])])

    result["ratio"] = ratio("torch", "ours")
    result["unpadding_ratio"] = ratio("padded", "ours")
    result["packing_ratio"] = ratio("separate", "padded")
    result["padding"] = 1 - tokens / (src.numel() + tgt.numel())
    result["sizes"] = dict(d_model=d_model, num_heads=num_heads, layers=num_layers, d_ff=d_ff, batch=batch,
                           src_len=src_len, tgt_len=tgt_len, vocab=vocab, dropout=dropout)
    return result


def bench_base_mfu(batch=64, seq_len=64, vocab=37000, repeats=10, device="cuda", compile=False, warmup=3):
    """Tokens per second and MFU of the paper's base model (bf16 autocast, Adam) on a CUDA GPU.

    Model FLOPs per step: ``6 * parameters * tokens`` for the matrix products, plus the
    attention scores and weighted sums (``12 * layers_attn * d_model * T²`` per sequence,
    forward and backward). With ``compile`` the model runs through ``torch.compile``
    (the fixed shapes compile once, in the warm-up steps, timed apart as
    ``"compile_s"``). Returns ``None`` off CUDA.

    Args:
        batch, seq_len: sentence pairs per step and their source and target length.
        vocab: the shared vocabulary (37,000 BPE tokens in the paper's EN-DE run).
        repeats: timed steps (the median is reported); warmup: untimed steps before.
        compile: ``torch.compile`` the model.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.manual_seed(0)
    config = PAPER_CONFIGS["base"].replace(share_embeddings=True, max_len=512)
    model = config.build(vocab, vocab).to(device)
    runner = torch.compile(model) if compile else model
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    src, tgt, labels = random_batch(batch, seq_len, seq_len, vocab, device, torch.Generator().manual_seed(3))
    src_mask, tgt_mask = padding_mask(src), decoder_mask(tgt)
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    warm_start = time.perf_counter()
    for repeat in range(repeats + warmup):
        if repeat == warmup:
            warmup_s = time.perf_counter() - warm_start
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            logits = runner(src, tgt, src_mask, tgt_mask)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), labels.reshape(-1), ignore_index=0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize(device)
        if repeat >= warmup:
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    tokens = batch * seq_len * 2  # source + target positions
    d_model = config.d_model
    # Encoder self-attention, decoder self- and cross-attention: 3 attention blocks per layer pair.
    attention_flops = 12 * 3 * config.num_encoder_layers * d_model * seq_len ** 2 * batch
    flops = 6 * count_parameters(model) * tokens + attention_flops
    name = torch.cuda.get_device_name(device)
    peak = next((value for key, value in _PEAK_BF16.items() if key in name), None)
    return {
        "device": name, "batch": batch, "seq_len": seq_len, "compile": compile, "step_s": step,
        "tokens_per_s": tokens / step, "tflops": flops / step / 1e12,
        "mfu": None if peak is None else flops / step / peak,
        "compile_s": warmup_s if compile else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2 ** 30,
    }
