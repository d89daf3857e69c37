"""The packed training path (``solutions.packing``) against the padded forward it replaces.

``packed_logits`` computes the position-wise layers on the rows of real tokens only and the
generator on the rows whose label is not padding. Its loss and every parameter's gradient
must be the padded model's (``model(src, tgt_in, padding_mask(src), decoder_mask(tgt_in))``
with ``ignore_index`` on the padding) in float64 to rounding: post-norm and pre-norm, with
and without tied embeddings, on batches with padding, without padding, and with a sentence
of a single token, through both of the fused attention's branches (SDPA, and the products
written out that run when attention dropout is on, on the CPU).
"""
import pytest
import torch
import torch.nn.functional as F

from solutions import TransformerConfig, decoder_mask, make_decoder_io, padding_mask
from solutions.fused import PackedMask, PackedRows
from solutions.packing import packed_logits, takes_packed_rows

VOCAB = 23
EXACT = dict(rtol=1e-10, atol=1e-12)  # float64: equal up to the order of summation
# A dropout probability that FastDropout rounds to 0 (a multiple of 2**-16): every mask is all ones and
# the scale 1, so the step is deterministic, but the fused attention takes its CPU dropout branch
# (the scores, the mask and the softmax written out) instead of F.scaled_dot_product_attention.
NO_DROP_BUT_DROPOUT_BRANCH = 1e-9


def model(norm_first, share_embeddings, dropout=0.0, dtype=torch.float64):
    torch.manual_seed(0)
    config = TransformerConfig(d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                               dropout=dropout, max_len=64, norm_first=norm_first,
                               share_embeddings=share_embeddings)
    return config.build(VOCAB, VOCAB).to(dtype).train()


def batch(kind):
    """``(src, tgt_in, labels)``: teacher forcing's pair from make_decoder_io, padded with 0."""
    generator = torch.Generator().manual_seed(3)

    def sentence(length):
        return torch.randint(4, VOCAB, (length,), generator=generator).tolist()

    if kind == "padded":
        sources, targets = [sentence(n) for n in (7, 3, 5, 1)], [sentence(n) for n in (2, 6, 4, 5)]
    elif kind == "no padding":
        sources, targets = [sentence(6) for _ in range(3)], [sentence(4) for _ in range(3)]
    elif kind == "single token":  # one sentence of a single token on both sides
        sources, targets = [sentence(n) for n in (5, 1, 4)], [sentence(n) for n in (3, 0, 6)]
    elif kind == "empty source":  # no key for the cross-attention of one sentence: its context is 0
        sources, targets = [sentence(n) for n in (5, 0, 4)], [sentence(n) for n in (3, 2, 6)]
    else:
        raise ValueError(kind)
    longest = max(map(len, sources))
    src = torch.tensor([s + [0] * (longest - len(s)) for s in sources])  # (B, S)
    tgt_in, labels = make_decoder_io(targets)  # (B, T) each
    return src, tgt_in, labels


def padded_loss(model, src, tgt_in, labels):
    logits = model(src, tgt_in, padding_mask(src), decoder_mask(tgt_in))  # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=0, label_smoothing=0.1)


def packed_loss(model, src, tgt_in, labels):
    logits, targets = packed_logits(model, src, tgt_in, labels)  # (M, V), (M,)
    return F.cross_entropy(logits, targets, label_smoothing=0.1)


def loss_and_gradients(loss_of, model, inputs):
    loss = loss_of(model, *inputs)
    names, parameters = zip(*model.named_parameters())
    return loss.detach(), dict(zip(names, torch.autograd.grad(loss, parameters)))


@pytest.mark.parametrize("kind", ["padded", "no padding", "single token", "empty source"])
@pytest.mark.parametrize("share_embeddings", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dropout", [0.0, NO_DROP_BUT_DROPOUT_BRANCH], ids=["sdpa", "dropout-branch"])
def test_packed_loss_and_every_gradient_equal_the_padded(norm_first, share_embeddings, kind, dropout):
    net = model(norm_first, share_embeddings, dropout)
    inputs = batch(kind)
    if kind == "no padding":
        assert (inputs[0] != 0).all() and (inputs[1] != 0).all()
    else:
        assert (inputs[0] == 0).any() and (inputs[1] == 0).any()
    padded, padded_grads = loss_and_gradients(padded_loss, net, inputs)
    packed, packed_grads = loss_and_gradients(packed_loss, net, inputs)
    torch.testing.assert_close(packed, padded, **EXACT)
    assert packed_grads.keys() == padded_grads.keys() == dict(net.named_parameters()).keys()
    for name, gradient in padded_grads.items():
        assert gradient.abs().sum() > 0 or name.endswith("bias"), f"{name}: no gradient reached it"
        torch.testing.assert_close(packed_grads[name], gradient, **EXACT, msg=lambda m, n=name: f"{n}: {m}")


def test_packed_logits_are_the_padded_logits_at_the_labelled_positions():
    net = model(False, False)
    src, tgt_in, labels = batch("padded")
    padded = net(src, tgt_in, padding_mask(src), decoder_mask(tgt_in))  # (B, T, V)
    logits, targets = packed_logits(net, src, tgt_in, labels)
    keep = labels != 0
    assert torch.equal(targets, labels[keep])  # row-major order
    torch.testing.assert_close(logits, padded[keep], **EXACT)


def test_float32_matches_the_padded_step_tightly():
    net = model(True, True, NO_DROP_BUT_DROPOUT_BRANCH, torch.float32)
    inputs = batch("padded")
    padded, padded_grads = loss_and_gradients(padded_loss, net, inputs)
    packed, packed_grads = loss_and_gradients(packed_loss, net, inputs)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-6)
    for name, gradient in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], gradient, rtol=1e-4, atol=1e-6,
                                   msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dropout", [0.0, NO_DROP_BUT_DROPOUT_BRANCH], ids=["sdpa", "dropout-branch"])
def test_labels_and_decoder_input_with_different_padding(dropout):
    """A label where the decoder input is padding, and a decoder token with a padded label: the
    packed path computes the positions either needs and predicts the labelled ones only. A
    label at a first position whose input is padding is a query with no key (its context is 0)."""
    net = model(False, True, dropout)
    src, tgt_in, labels = batch("padded")
    labels, tgt_in = labels.clone(), tgt_in.clone()
    row = int((tgt_in[:, -1] == 0).nonzero()[0])
    first_pad = int((tgt_in[row] == 0).nonzero()[0])
    labels[row, first_pad] = 7  # a label the decoder input does not read a token for
    labels[0, 0] = 0  # a token read, nothing predicted
    tgt_in[1, 0] = 0  # a label predicted from no token at all: no key for that query
    padded, padded_grads = loss_and_gradients(padded_loss, net, (src, tgt_in, labels))
    packed, packed_grads = loss_and_gradients(packed_loss, net, (src, tgt_in, labels))
    torch.testing.assert_close(packed, padded, **EXACT)
    for name, gradient in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], gradient, **EXACT, msg=lambda m, n=name: f"{n}: {m}")


def test_with_dropout_the_packed_step_trains_the_same_parameters():
    """Dropout on: other masks than the padded step's (N rows, not B·T), the same parameters,
    names and optimizer state as the padded step's."""
    nets = {path: model(False, False, dropout=0.1, dtype=torch.float32) for path in ("packed", "padded")}
    for path, loss_of in (("packed", packed_loss), ("padded", padded_loss)):
        optimizer = torch.optim.Adam(nets[path].parameters(), lr=1e-3)
        loss = loss_of(nets[path], *batch("padded"))
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
        nets[path].optimizer_state = optimizer.state_dict()["state"]
    packed, padded = nets["packed"], nets["padded"]
    assert packed.state_dict().keys() == padded.state_dict().keys()
    assert packed.optimizer_state.keys() == padded.optimizer_state.keys()
    initial = model(False, False, dropout=0.1, dtype=torch.float32)
    assert all(not torch.equal(p, q) for p, q in zip(packed.parameters(), initial.parameters()))  # Adam moved all
    assert all(torch.isfinite(p).all() for p in packed.parameters())


def test_which_models_take_packed_rows():
    fused = model(False, False)
    assert takes_packed_rows(fused)
    readable = TransformerConfig(d_model=16, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                                 attention="readable").build(VOCAB, VOCAB)
    assert not takes_packed_rows(readable) and not takes_packed_rows(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="attention='fused'"):
        packed_logits(readable, *batch("padded"))
    fused.set_fused(False)  # the readable path, to keep the weights for a plot
    assert not takes_packed_rows(fused)
    with pytest.raises(ValueError, match="fused fast path"):
        packed_logits(fused, *batch("padded"))


def test_packed_rows_to_heads_and_from_heads_are_inverse():
    keep = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    rows = PackedRows(keep)
    assert rows.index.tolist() == [0, 1, 6] and (rows.batch, rows.length, len(rows)) == (3, 3, 3)
    assert rows.sentence.tolist() == [0, 0, 2] and rows.position.tolist() == [0, 1, 0]
    values = torch.arange(12.0).reshape(3, 4)  # 3 rows, 2 heads of 2
    grid = rows.to_heads(values, 2)[0]  # (3, 2, 3, 2)
    assert grid.shape == (3, 2, 3, 2) and grid.is_contiguous()
    assert grid.permute(0, 2, 1, 3)[~keep].abs().sum() == 0  # zeros where there is no row
    assert torch.equal(grid.permute(0, 2, 1, 3)[keep].reshape(3, 4), values)  # (B, T, h, d_k) = split_heads' layout
    assert torch.equal(rows.from_heads(grid), values)
    three = torch.arange(36.0).reshape(3, 12)  # [Q K V] side by side, 2 heads of 2 each
    grids = rows.to_heads(three, 2, parts=3)  # (3, B, h, T, d_k)
    for part, (grid, columns) in enumerate(zip(grids.unbind(0), three.split(4, dim=1))):
        assert grid.is_contiguous() and torch.equal(rows.from_heads(grid), columns), part
    with pytest.raises(ValueError, match="rows must have shape"):
        rows.to_heads(torch.zeros(4, 4), 2)
    with pytest.raises(ValueError, match="rows must have shape"):
        rows.to_heads(torch.zeros(3, 4), 2, parts=3)
    with pytest.raises(ValueError, match="grid must have shape"):
        rows.from_heads(torch.zeros(3, 2, 4, 2))
    with pytest.raises(ValueError, match="keep must be a boolean"):
        PackedRows(torch.ones(3, 3))
    with pytest.raises(ValueError, match="batches of 3 and 2"):
        PackedMask(rows, PackedRows(torch.ones(2, 3, dtype=torch.bool)), None)


def test_a_packed_mask_knows_once_whether_a_query_row_has_no_key():
    src = torch.tensor([[5, 6, 0], [0, 0, 0]])  # the second source is empty
    tgt = torch.tensor([[1, 7], [1, 8]])
    src_rows, tgt_rows = PackedRows(src != 0), PackedRows(tgt != 0)
    assert not PackedMask(src_rows, src_rows, padding_mask(src)).some_query_has_no_key
    assert not PackedMask(tgt_rows, tgt_rows, decoder_mask(tgt)).some_query_has_no_key
    assert PackedMask(tgt_rows, src_rows, padding_mask(src)).some_query_has_no_key  # sentence 2 reads no source
    bias = PackedMask(tgt_rows, src_rows, padding_mask(src)).score_bias(2, torch.float64)  # (B·h, T_q, T_k)
    assert bias.shape == (4, 2, 3) and bias[0, 0].tolist() == [0, 0, torch.finfo(torch.float64).min]
