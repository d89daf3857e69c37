"""Where a training step's time goes: ``torch.profiler`` op by op, ours beside ``torch.nn.Transformer``.

:func:`profile_training_step` runs the same training step as
:func:`~solutions.app.bench_training.bench_training_step` (forward, backward, gradient clipping, Adam;
dropout 0.1, label smoothing 0.1) for :class:`solutions.Transformer` as the trainer runs it (the
fast attention path, on the batch's real tokens only: :func:`~solutions.packing.packed_logits`)
and for ``torch.nn.Transformer`` of the same sizes (on the padded batch, as its users call it), under ``torch.profiler`` on the CPU,
and reports each model's top operators by their own ("self") CPU time and their share of
the step. Two size sets are named: ``"bench"`` (``make bench``'s) and ``"multi30k"`` (the
``multi30k-cpu`` preset's model on batches of Multi30k's lengths).

``python -m solutions bench --profile bench`` (or ``multi30k``) prints the two tables.
Shares, not times, are what to read on a shared machine: the profiler itself slows small
operators, and another job's load changes every time but not where a step spends it.

Paper: section 5.2 (training cost), through the model of section 3.
"""
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from ..configuration import TransformerConfig
from ..packing import packed_logits
from .bench_setup import TorchTransformerBaseline, random_batch
from .config import PRESETS

__all__ = ["PROFILE_SIZES", "profile_training_step", "format_profile"]

# The two shapes the README's speed section profiles.
_M30K = PRESETS["multi30k-cpu"]
PROFILE_SIZES = {
    # make bench's training step: post-norm, 8 heads, batches of 32 x 32 tokens, vocabulary 2,000.
    "bench": dict(d_model=256, num_heads=8, num_layers=3, d_ff=1024, batch=32, src_len=32, tgt_len=32,
                  vocab=2000, norm_first=False),
    # The multi30k-cpu preset's model (pre-norm, 4 heads, its shared BPE vocabulary) on its batches of
    # 64 pairs, here of up to 24 tokens (Multi30k's sentences average 15).
    "multi30k": dict(d_model=_M30K.model.d_model, num_heads=_M30K.model.num_heads,
                     num_layers=_M30K.model.num_encoder_layers, d_ff=_M30K.model.d_ff, batch=_M30K.batch_size,
                     src_len=24, tgt_len=24, vocab=_M30K.bpe_vocab_size, norm_first=_M30K.model.norm_first),
}


def profile_training_step(sizes="bench", steps=5, warmup=2, top=12, threads=None):
    """Profile ``steps`` training steps of ours and of ``torch.nn.Transformer``, op by op.

    Args:
        sizes: a name of :data:`PROFILE_SIZES` or a dict with the same keys.
        steps: profiled steps per model (after ``warmup`` unprofiled ones).
        warmup: steps run before profiling (allocator and kernel caches warm).
        top: operators kept per model.
        threads: ``torch.set_num_threads`` for the run (default: leave as is; restored after).

    Returns:
        ``{"sizes": dict, "ours": report, "torch": report}``, each report
        ``{"total_ms": float, "ops": [{"name", "self_ms", "share", "calls"}, ...]}``: the
        self CPU time per step (ms), its share of the step's total self time, calls per step.
    """
    sizes = dict(PROFILE_SIZES[sizes]) if isinstance(sizes, str) else dict(sizes)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _profile(sizes, steps, warmup, top)
    finally:
        torch.set_num_threads(previous_threads)


def _profile(sizes, steps, warmup, top):
    vocab = sizes["vocab"]
    src, tgt, labels = random_batch(sizes["batch"], sizes["src_len"], sizes["tgt_len"], vocab, torch.device("cpu"),
                                    torch.Generator().manual_seed(1))
    layers = (sizes["d_model"], sizes["num_heads"], sizes["num_layers"], sizes["num_layers"], sizes["d_ff"], 0.1)
    torch.manual_seed(0)
    ours = TransformerConfig(d_model=sizes["d_model"], num_heads=sizes["num_heads"],
                             num_encoder_layers=sizes["num_layers"], num_decoder_layers=sizes["num_layers"],
                             d_ff=sizes["d_ff"], dropout=0.1, max_len=512,
                             norm_first=sizes["norm_first"]).build(vocab, vocab)
    theirs = TorchTransformerBaseline(vocab, vocab, *layers, norm_first=sizes["norm_first"])
    reports = {}
    for name, model in (("ours", ours), ("torch", theirs)):
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

        def step():
            if name == "ours":  # as the trainer steps: (M, V) logits for the M labels that are not padding
                logits, targets = packed_logits(model, src, tgt, labels)
            else:
                # masks: True = padding, PyTorch's convention; (B, T, V), (B*T,)
                logits, targets = model(src, tgt, src == 0, tgt == 0), labels.reshape(-1)
            loss = F.cross_entropy(logits.reshape(-1, vocab), targets, ignore_index=0, label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        for _ in range(warmup):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        reports[name] = _top_ops(prof, steps, top)
    return {"sizes": sizes, "threads": torch.get_num_threads(), **reports}


def _top_ops(prof, steps, top):
    """The operators with the most self CPU time, per step, and their share of the step."""
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)  # µs, all profiled steps
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    ops = [{"name": e.key, "self_ms": e.self_cpu_time_total / steps / 1e3, "share": e.self_cpu_time_total / total,
            "calls": e.count / steps} for e in events[:top]]
    return {"total_ms": total / steps / 1e3, "ops": ops}


def format_profile(result):
    """The two reports as text lines: rank, operator, share, self ms per step, calls per step."""
    sizes = ", ".join(f"{key} {value}" for key, value in result["sizes"].items())
    lines = [f"training step profile (self CPU time per step, {result['threads']} threads), {sizes}"]
    for name in ("ours", "torch"):
        report = result[name]
        label = "solutions.Transformer (fast path, packed rows)" if name == "ours" else "torch.nn.Transformer"
        lines.append(f"  {label}: {report['total_ms']:.1f} ms of operator time per step")
        for rank, op in enumerate(report["ops"], 1):
            lines.append(f"    {rank:2d}. {op['name']:<40} {100 * op['share']:5.1f} %  {op['self_ms']:8.2f} ms  "
                         f"{op['calls']:6.1f} calls")
    return lines
