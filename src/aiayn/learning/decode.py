"""Generation with a trained encoder-decoder: greedy decoding, beam search (Section 6.1)
and incremental decoding with cached keys and values.

Training sees the whole target at once (teacher forcing); generation cannot: token
``t`` is only known after step ``t``, so the decoder runs once per output token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..inspection import attention_maps
from ..masks import padding_mask
from ..model import Transformer

__all__ = [
    "Decoded", "greedy_decode", "beam_search", "beam_search_batch", "length_penalty", "cross_attention", "translate",
]


@dataclass
class Decoded:
    """What :func:`greedy_decode` returns.

    ``tokens`` ``(B, L)``: the generated ids without ``<bos>``, padding after ``<eos>``.
    ``logits`` and ``probs`` ``(B, L, V)``: each step's logits and softmax.
    ``token_probs`` ``(B, L)``: the probability of the chosen token at each step.
    ``cross_attention``: if asked, one ``(B, H, L, S)`` tensor per decoder layer.
    ``n_decoder_calls``: how many times the decoder ran (once per step)."""

    tokens: torch.Tensor
    logits: torch.Tensor
    probs: torch.Tensor
    token_probs: torch.Tensor
    n_decoder_calls: int
    cross_attention: list[torch.Tensor] | None = None


def _check_model_src(model, src: torch.Tensor) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be an aiayn Transformer, got {type(model).__name__}")
    if not isinstance(src, torch.Tensor) or src.dim() != 2:
        raise ValueError("src must be a (batch, length) tensor of token ids")


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int = 50,
    use_cache: bool = False,
    return_attention: bool = False,
) -> Decoded:
    """Pick the most probable token at each step until every row has produced ``<eos>``.

    Without the cache, step ``t`` re-runs the decoder on the whole prefix ``y_0..y_t`` and
    keeps the last position's logits; with ``use_cache`` it feeds only the newest token and
    reuses the keys and values of the earlier ones (:meth:`~aiayn.model.Transformer.decode_step`). The
    two give the same tokens; their logits agree up to rounding."""
    _check_model_src(model, src)
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    model.eval()
    memory_mask = padding_mask(src, model.config.pad_id)  # (B, 1, 1, S)
    memory = model.encode(src, memory_mask)  # (B, S, d_model), once for all steps
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    caches = [{} for _ in range(model.config.n_layers)]
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    step_logits = []
    for _ in range(max_len):
        if use_cache:
            logits = model.decode_step(ys[:, -1:], memory, caches, memory_mask)[:, -1]
        else:
            logits = model.decode(ys, memory, memory_mask)[:, -1]  # (B, V) of the last position
        step_logits.append(logits)
        next_token = logits.argmax(dim=-1)  # (B,)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
        finished |= next_token == eos_id
        if finished.all():
            break
    logits = torch.stack(step_logits, dim=1)  # (B, L, V)
    probs = torch.softmax(logits, dim=-1)
    tokens = ys[:, 1:]
    token_probs = probs.gather(-1, tokens[..., None])[..., 0]  # (B, L)
    after_eos = (tokens == eos_id).long().cumsum(dim=1) - (tokens == eos_id).long() > 0
    tokens = tokens.masked_fill(after_eos, model.config.pad_id)
    attention = cross_attention(model, src, ys[:, :-1]) if return_attention else None
    return Decoded(tokens, logits, probs, token_probs, len(step_logits), attention)


@torch.no_grad()
def cross_attention(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> list[torch.Tensor]:
    """Cross-attention weights of every decoder layer, ``(B, H, T, S)`` each, when the
    decoder reads ``tgt`` (``<bos>`` + tokens so far) in one teacher-forced pass.

    Row ``t`` is where the decoder looked while choosing output token ``t + 1``. (The
    causal mask makes these rows identical to those of step-by-step decoding.)"""
    _check_model_src(model, src)
    model.eval()
    return attention_maps(model, src, tgt, kinds=("cross",))["cross"]


def length_penalty(length: int, alpha: float = 0.6) -> float:
    """GNMT's length penalty ``((5 + |Y|) / 6) ** alpha`` (Wu et al., 2016), alpha = 0.6 in
    Section 6.1. Beam search ranks finished hypotheses by ``log P(Y) / length_penalty``."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    max_len: int = 50,
    alpha: float = 0.6,
    use_cache: bool = False,
    trace: list | None = None,
) -> list[tuple[list[int], float]]:
    """Beam search for one source ``src`` ``(1, S)`` (Section 6.1: beam 4, alpha 0.6).

    Keeps the ``beam_size`` most probable prefixes; a prefix that emits ``<eos>`` is
    finished and scored ``log P(Y) / length_penalty(|Y|)`` (``|Y|`` counts ``<eos>``).
    Stops when ``beam_size`` hypotheses are finished and no live prefix can still beat
    the best. Returns ``(tokens, score)`` pairs, best first; tokens exclude ``<bos>`` and
    ``<eos>``. ``beam_size = 1`` is greedy decoding. :func:`beam_search_batch` does the
    same for a batch of sources at once; ``use_cache`` and ``trace`` as there."""
    _check_model_src(model, src)
    if src.shape[0] != 1:
        raise ValueError(f"beam_search decodes one source at a time, got batch {src.shape[0]}")
    steps = [] if isinstance(trace, list) else trace  # anything else: an error below
    hyps = beam_search_batch(model, src, bos_id, eos_id, beam_size, max_len, alpha, use_cache, steps)[0]
    if trace is not None:
        trace.extend(step[0] for step in steps)
    return hyps


@torch.no_grad()
def beam_search_batch(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    max_len: int = 50,
    alpha: float = 0.6,
    use_cache: bool = False,
    trace: list | None = None,
) -> list[list[tuple[list[int], float]]]:
    """:func:`beam_search` for every row of ``src`` ``(B, S)`` (padded) at once: one
    decoder call per step for all ``B * beam_size`` live prefixes. Returns one list of
    ``(tokens, score)`` pairs per source, the same lists as :func:`beam_search` gives
    one source at a time.

    With ``use_cache`` each step feeds only the newest token of every prefix and reuses
    the cached keys and values of the earlier ones (:meth:`~aiayn.model.Transformer.decode_step`),
    reordered as the beams are: the same hypotheses, scores equal up to rounding, at a
    cost per step that does not grow with the prefix.

    ``trace``: a list to which each step appends, per source, a dict with ``alive`` (the
    kept prefixes as ``(tokens, log P)``, best first) and ``finished`` (the prefixes that
    ended with ``<eos>`` at this step, as ``(tokens, log P, score)``), for showing the
    search; it changes nothing else."""
    _check_model_src(model, src)
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    if trace is not None and not isinstance(trace, list):
        raise TypeError(f"trace must be a list (or None), got {type(trace).__name__}")
    model.eval()
    B, k = src.shape[0], beam_size
    memory_mask = padding_mask(src, model.config.pad_id)  # (B, 1, 1, S)
    memory = model.encode(src, memory_mask)  # (B, S, d_model)
    memory, memory_mask = memory.repeat_interleave(k, 0), memory_mask.repeat_interleave(k, 0)
    alive = torch.full((B * k, 1), bos_id, dtype=torch.long, device=src.device)  # (B k, t)
    # log P of each live prefix; at the start only beam 0 of each source is real
    alive_scores = torch.full((B, k), -math.inf, dtype=torch.float64, device=src.device)
    alive_scores[:, 0] = 0.0
    finished: list[list[tuple[list[int], float]]] = [[] for _ in range(B)]
    done = [False] * B
    caches = [{} for _ in range(model.config.n_layers)]
    for _ in range(max_len):
        if use_cache:
            logits = model.decode_step(alive[:, -1:], memory, caches, memory_mask)[:, -1]
        else:
            logits = model.decode(alive, memory, memory_mask)[:, -1]  # (B k, V)
        log_p = torch.log_softmax(logits.double(), dim=-1).view(B, k, -1)
        vocab = log_p.shape[-1]
        scores = (alive_scores[..., None] + log_p).view(B, k * vocab)
        top_scores, top_ids = scores.topk(min(2 * k, k * vocab), dim=-1)  # (B, 2k)
        parents = torch.arange(B * k, device=src.device)  # dead beams: keep any row ...
        tokens = torch.full((B * k,), bos_id, dtype=torch.long, device=src.device)
        next_scores = torch.full((B, k), -math.inf, dtype=torch.float64, device=src.device)
        ended = [[] for _ in range(B)]  # (tokens, log P, score) that end at this step
        for b in range(B):  # ... with score -inf, so it is never chosen
            if done[b]:
                continue
            kept = 0
            for score, flat in zip(top_scores[b].tolist(), top_ids[b].tolist(), strict=True):
                beam, token = divmod(flat, vocab)
                if score == -math.inf:
                    break
                if token == eos_id:
                    hyp = alive[b * k + beam, 1:].tolist()
                    finished[b].append((hyp, score / length_penalty(len(hyp) + 1, alpha)))
                    ended[b].append((hyp, score, finished[b][-1][1]))
                elif kept < k:
                    parents[b * k + kept], tokens[b * k + kept] = b * k + beam, token
                    next_scores[b, kept] = score
                    kept += 1
            finished[b].sort(key=lambda h: -h[1])
            # Log-probabilities only fall and the penalty is at most length_penalty(max_len):
            best_possible = next_scores[b].max().item() / length_penalty(max_len, alpha)
            if kept == 0 or (len(finished[b]) >= k and finished[b][0][1] >= best_possible):
                done[b] = True
        if trace is not None:
            trace.append(_trace_step(alive[parents], tokens, next_scores, ended))
        if all(done):
            break
        alive = torch.cat([alive[parents], tokens[:, None]], dim=1)  # (B k, t + 1)
        alive_scores = next_scores
        for cache in caches if use_cache else ():  # each kept prefix takes its parent's keys
            own = cache["self"]  # (cross-attention keys are the same for a source's beams)
            own["k"], own["v"] = own["k"][parents], own["v"][parents]  # (B k, H, t, d_k)
    for b in range(B):
        if not finished[b]:  # nothing ended within max_len: return the live prefixes
            rows = [(alive[b * k + j, 1:].tolist(), s) for j, s in
                    enumerate(alive_scores[b].tolist()) if s > -math.inf]
            finished[b] = sorted(((t, s / length_penalty(len(t), alpha)) for t, s in rows),
                                 key=lambda h: -h[1])
    return [hyps[:k] for hyps in finished]


def _trace_step(prefixes, tokens, scores, ended) -> list[dict]:
    """One step of a beam-search trace: per source, its kept and its ended prefixes."""
    B, k = scores.shape
    rows = torch.cat([prefixes, tokens[:, None]], dim=1)[:, 1:].tolist()  # without <bos>
    return [{"alive": [(rows[b * k + j], s) for j, s in enumerate(scores[b].tolist())
                       if s > -math.inf],
             "finished": ended[b]} for b in range(B)]


@torch.no_grad()
def translate(model: Transformer, tokenizer, text: str, beam_size: int = 1, max_len: int = 30) -> dict:
    """Translate one string and explain the answer; never raises on a malformed ``text``.

    Returns a dict: ``output`` (the decoded text), ``chars`` (its characters and
    ``<eos>``), ``confidence`` (the probability of each, by teacher forcing on the
    output), ``attention`` (the last decoder layer's cross-attention averaged over the
    heads, ``(len(chars), len(text) + 1)``), ``source`` (the input characters and
    ``<eos>``), and ``error`` (None, or a sentence saying why ``text`` cannot be read)."""
    result = {"output": "", "chars": [], "confidence": [], "attention": None,
              "source": [], "error": None}
    if not isinstance(text, str) or not text.strip():
        result["error"] = "Type a date, e.g. 'Nov 29, 2026'."
        return result
    try:
        ids = tokenizer.encode(text)
    except ValueError as err:
        result["error"] = str(err)
        return result
    if len(ids) > model.config.max_len:
        result["error"] = f"the input is too long ({len(ids)} tokens, at most {model.config.max_len})"
        return result
    device = next(model.parameters()).device
    src = torch.tensor([ids], device=device)  # (1, S)
    if beam_size == 1:
        tokens = greedy_decode(model, src, tokenizer.bos_id, tokenizer.eos_id, max_len, True).tokens[0]
        out = [t for t in tokens.tolist() if t not in (tokenizer.pad_id, tokenizer.eos_id)]
    else:
        out = beam_search(model, src, tokenizer.bos_id, tokenizer.eos_id, beam_size, max_len)[0][0]
    tgt = torch.tensor([[tokenizer.bos_id, *out, tokenizer.eos_id]], device=device)
    probs = torch.softmax(model(src, tgt[:, :-1]), dim=-1)[0]  # (T, V), teacher forced
    maps = cross_attention(model, src, tgt[:, :-1])
    result.update(
        output=tokenizer.decode(out),
        # one label per decoded id (an untrained model may emit <pad> or <bos>, which
        # decode() drops), so chars and confidence always have the same length
        chars=[*(tokenizer.decode([t]) or tokenizer.specials[t] for t in out), "<eos>"],
        confidence=probs.gather(-1, tgt[0, 1:, None])[:, 0].tolist(),
        attention=maps[-1][0].mean(dim=0).cpu(),  # (H, T, S) -> (T, S)
        source=[*text, "<eos>"],
    )
    return result
