"""A plain recurrent layer: the baseline the paper replaced (Section 1 and Section 4).

``h_t = tanh(W_hh h_{t-1} + W_xh x_t + b)`` (or another ``f`` than tanh), batch-first like the
rest of the package.
Besides the layer, this module holds what chapter 1 measures with it: how the gradient
``dh_n/dh_t`` shrinks or grows with the distance ``n - t`` (a product of ``n - t``
Jacobians, one per step), the same kind of gradient through a self-attention layer, and
small readers for the long-range recall task of :func:`aiayn.learning.data.recall_task` (a plain
recurrent one, a gated one built on ``torch.nn.LSTM``, and one attention layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ..positional import PositionalEncoding
from ..utils import check_tensor, check_tokens

__all__ = [
    "RNN",
    "spectral_radius",
    "scale_to_spectral_radius",
    "hidden_gradient_log_norms",
    "random_rnn",
    "gradient_decay",
    "greedy_generate",
    "input_gradient_norms",
    "fit_geometric_rate",
    "RNNReader",
    "LSTMReader",
    "AttentionReader",
]


def _check_positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


# f of h_t = f(...), and its derivative written through the output h = f(a): the stored states are
# what backpropagation (hidden_gradient_log_norms) has at hand.
NONLINEARITIES = {
    "tanh": (torch.tanh, lambda h: 1 - h**2),
    "relu": (torch.relu, lambda h: (h > 0).to(h.dtype)),
    "identity": (lambda a: a, torch.ones_like),  # a linear recurrent layer
}


class RNN(nn.Module):
    """One recurrent layer: ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)``, ``f = tanh`` by default.

    ``w_xh`` (``nn.Linear(d_input, d_model)``, holding ``b``) and ``w_hh``
    (``nn.Linear(d_model, d_model, bias=False)``). It computes what
    ``torch.nn.RNN(d_input, d_model, batch_first=True)`` computes, with one bias instead
    of torch's two (``b = bias_ih + bias_hh``). ``nonlinearity`` is ``"tanh"``, ``"relu"``
    (torch.nn.RNN's two) or ``"identity"`` (a linear recurrent layer).
    """

    def __init__(
        self, d_input: int, d_model: int, bias: bool = True, nonlinearity: str = "tanh"
    ):
        super().__init__()
        _check_positive_int("d_input", d_input)
        _check_positive_int("d_model", d_model)
        if nonlinearity not in NONLINEARITIES:
            raise ValueError(
                f"nonlinearity must be one of {sorted(NONLINEARITIES)}, got {nonlinearity!r}"
            )
        self.d_input, self.d_model = d_input, d_model
        self.nonlinearity = nonlinearity
        self.w_xh = nn.Linear(d_input, d_model, bias=bias)
        self.w_hh = nn.Linear(d_model, d_model, bias=False)
        # torch.nn.RNN's initialisation: uniform in +-1/sqrt(d_model).
        bound = 1.0 / math.sqrt(d_model)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def f(self, a: torch.Tensor) -> torch.Tensor:
        """The nonlinearity, applied to the pre-activation ``a``."""
        return NONLINEARITIES[self.nonlinearity][0](a)

    def f_prime(self, h: torch.Tensor) -> torch.Tensor:
        """Its derivative ``f'(a)``, written through the output ``h = f(a)``."""
        return NONLINEARITIES[self.nonlinearity][1](h)

    def step(self, x_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One step: ``(B, d_input)``, ``(B, d_model)`` -> ``h_t`` ``(B, d_model)``."""
        return self.f(self.w_xh(x_t) + self.w_hh(h))

    def forward(
        self, x: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run over ``x`` ``(B, T, d_input)`` from ``h0`` ``(B, d_model)`` (zeros by default).

        Returns ``(outputs, h_n)``: every hidden state ``(B, T, d_model)`` and the last one
        ``(B, d_model)``.
        """
        check_tensor("x", x, ndim=3)
        if x.shape[-1] != self.d_input:
            raise ValueError(
                f"x must have d_input={self.d_input} features, got shape {tuple(x.shape)}"
            )
        batch, length, _ = x.shape
        if h0 is None:
            h = x.new_zeros(batch, self.d_model)
        else:
            check_tensor("h0", h0, ndim=2)
            if h0.shape != (batch, self.d_model):
                raise ValueError(
                    f"h0 must have shape (batch, d_model) = {(batch, self.d_model)}, "
                    f"got {tuple(h0.shape)}"
                )
            h = h0
        # The input projection has no recurrence: all T positions in one matrix product.
        # Only the chain through W_hh is sequential.
        xw = self.w_xh(x)  # (B, T, d_model)
        outputs = []
        for t in range(length):  # T sequential steps: h_t needs h_{t-1}
            h = self.f(xw[:, t] + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h  # (B, T, d_model), (B, d_model)

    def extra_repr(self) -> str:
        return (
            f"d_input={self.d_input}, d_model={self.d_model}, nonlinearity={self.nonlinearity!r}"
        )


# ----------------------------------------------------------- gradients against distance


def spectral_radius(weight: torch.Tensor) -> float:
    """Largest absolute eigenvalue of a square matrix."""
    check_tensor("weight", weight, ndim=2)
    if weight.shape[0] != weight.shape[1]:
        raise ValueError(f"weight must be square, got shape {tuple(weight.shape)}")
    return torch.linalg.eigvals(weight.detach().double().cpu()).abs().max().item()


def scale_to_spectral_radius(weight: torch.Tensor, radius: float) -> torch.Tensor:
    """``weight`` rescaled so that its spectral radius is ``radius`` (same eigenvectors)."""
    if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be a positive finite number, got {radius!r}")
    rho = spectral_radius(weight)
    if rho == 0:
        raise ValueError("weight has spectral radius 0 (nilpotent): it cannot be rescaled")
    return weight * (radius / rho)


def hidden_gradient_log_norms(layer: RNN, x: torch.Tensor, h0: torch.Tensor | None = None,
                              cotangent: torch.Tensor | None = None) -> torch.Tensor:
    """``ln ||dL/dh_{n-k}||`` for ``k = 0..T`` with ``L = u . h_n``, ``n = T``: ``(B, T + 1)``.

    This is the gradient that backpropagation carries from a loss at the last step back
    to step ``n - k``. Each step contributes one Jacobian, ``dh_s/dh_{s-1} = diag(f'(a_s)) W_hh``
    with the layer's own ``f'`` (``1 - h_s^2`` for tanh; see ``RNN(nonlinearity=...)``), so it
    is ``u^T`` times a product of ``k`` of them: the path from ``h_{n-k}`` to ``h_n`` has length ``k``. ``u`` (``(B, D)``) is
    ``cotangent`` normalised to unit length, by default ``(1, ..., 1) / sqrt(D)``; ``k = 0``
    gives 1. The vector is renormalised at every step and its scale kept as a logarithm,
    so it neither underflows nor overflows however long the sequence.
    """
    with torch.no_grad():
        states, _ = layer(x, h0)  # (B, T, D)
        w_hh = layer.w_hh.weight
        batch, length, d = states.shape
        if cotangent is None:
            cotangent = states.new_ones(batch, d)
        elif cotangent.shape != (batch, d):
            raise ValueError(
                f"cotangent must have shape (batch, d_model) = {(batch, d)}, "
                f"got {tuple(cotangent.shape)}"
            )
        grad = cotangent / torch.linalg.vector_norm(cotangent, dim=-1, keepdim=True)
        log_scale = states.new_zeros(batch)
        log_norms = [log_scale.clone()]  # k = 0: |u| = 1
        for s in range(length - 1, -1, -1):  # from h_s back to h_{s-1}
            grad = (grad * layer.f_prime(states[:, s])) @ w_hh  # u^T diag(f'(a_s)) W_hh
            size = torch.linalg.vector_norm(grad, dim=-1)  # (B,)
            log_scale = log_scale + size.clamp_min(1e-300).log()
            grad = grad / size.clamp_min(1e-300)[:, None]
            log_norms.append(log_scale.clone())
        return torch.stack(log_norms, dim=1)  # (B, T + 1)


def random_rnn(d_model: int, radius: float, seed: int = 0, dtype: torch.dtype = torch.float64,
               nonlinearity: str = "tanh") -> RNN:
    """An :class:`RNN` with Gaussian weights and ``W_hh`` rescaled to spectral radius ``radius``.

    ``W_hh`` and ``W_xh`` have ``N(0, 1/d_model)`` entries (``W_hh``'s eigenvalues then
    fill a disc of radius about 1, which is rescaled to ``radius`` exactly) and ``b = 0``.
    Drawn from a generator seeded with ``seed``: the same layer on every machine.
    """
    _check_positive_int("d_model", d_model)
    gen = torch.Generator().manual_seed(seed)
    layer = RNN(d_model, d_model, nonlinearity=nonlinearity).to(dtype)
    w_hh = torch.randn(d_model, d_model, generator=gen, dtype=torch.float64) / math.sqrt(d_model)
    w_xh = torch.randn(d_model, d_model, generator=gen, dtype=torch.float64) / math.sqrt(d_model)
    with torch.no_grad():
        layer.w_hh.weight.copy_(scale_to_spectral_radius(w_hh, radius))
        layer.w_xh.weight.copy_(w_xh)
        layer.w_xh.bias.zero_()
    return layer


def gradient_decay(radius: float, length: int, d_model: int = 64, input_std: float = 0.1,
                   batch_size: int = 8, seed: int = 0, burn_in: int = 50,
                   nonlinearity: str = "tanh") -> torch.Tensor:
    """Mean over a batch of ``ln ||dL/dh_{n-k}||``, ``k = 0..length``: shape ``(length + 1,)``.

    The layer is :func:`random_rnn` ``(d_model, radius, seed, nonlinearity=...)`` in float64, the inputs are
    ``N(0, input_std^2)`` (small inputs keep the activations small, so the Jacobians are
    close to ``W_hh``). The layer first reads ``burn_in`` extra steps, so that every
    distance shown starts from a hidden state in its running regime, not from ``h_0 = 0``.
    See :func:`hidden_gradient_log_norms`.
    """
    _check_positive_int("length", length)
    _check_positive_int("batch_size", batch_size)
    if not isinstance(burn_in, int) or isinstance(burn_in, bool) or burn_in < 0:
        raise ValueError(f"burn_in must be an int >= 0, got {burn_in!r}")
    if not (isinstance(input_std, (int, float)) and math.isfinite(input_std) and input_std >= 0):
        raise ValueError(f"input_std must be a finite number >= 0, got {input_std!r}")
    layer = random_rnn(d_model, radius, seed, nonlinearity=nonlinearity)
    gen = torch.Generator().manual_seed(seed + 1)
    shape = (batch_size, burn_in + length, d_model)
    x = input_std * torch.randn(shape, generator=gen, dtype=torch.float64)
    return hidden_gradient_log_norms(layer, x).mean(0)[: length + 1]


def input_gradient_norms(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, position: int = -1
) -> torch.Tensor:
    """``||d out[position] / d x[t]||_2`` for every input position ``t``: shape ``(T,)``.

    ``fn`` maps ``x`` ``(1, T, D_in)`` to outputs ``(1, T, D_out)`` (a recurrent layer's
    states, a self-attention layer's outputs). Each entry is the spectral norm of a
    ``D_out x D_in`` block of the Jacobian, computed by autograd.
    """
    check_tensor("x", x, ndim=3)
    if x.shape[0] != 1:
        raise ValueError(f"x must hold one sequence, shape (1, T, D), got {tuple(x.shape)}")

    def output_row(inp: torch.Tensor) -> torch.Tensor:
        return fn(inp)[0, position]  # (D_out,)

    jac = torch.autograd.functional.jacobian(output_row, x)  # (D_out, 1, T, D_in)
    blocks = jac[:, 0].permute(1, 0, 2)  # (T, D_out, D_in)
    return torch.linalg.matrix_norm(blocks, ord=2)


def fit_geometric_rate(log_norms: torch.Tensor, start: int = 0) -> float:
    """The rate ``r`` of the least-squares fit ``ln ||J_k|| = a + k ln r`` over ``k >= start``.

    ``log_norms`` is ``(K,)`` or ``(B, K)`` (averaged over the batch first: the geometric
    mean of the norms). ``r < 1``: gradients vanish geometrically; ``r > 1``: they explode.
    """
    check_tensor("log_norms", log_norms, min_dim=1)
    values = log_norms.double().reshape(-1, log_norms.shape[-1]).mean(0)[start:]
    if values.numel() < 2:
        raise ValueError(
            f"need at least 2 distances from start={start}, got {log_norms.shape[-1]}"
        )
    k = torch.arange(start, start + values.numel(), dtype=torch.float64)
    k_c, v_c = k - k.mean(), values - values.mean()
    slope = (k_c * v_c).sum() / (k_c * k_c).sum()
    return math.exp(slope.item())


# ------------------------------------------------------------ readers for the recall task


class RNNReader(nn.Module):
    """Embedding, one :class:`RNN`, and a linear read-out of the last hidden state."""

    def __init__(self, vocab_size: int, d_model: int, n_classes: int):
        super().__init__()
        _check_positive_int("vocab_size", vocab_size)
        _check_positive_int("n_classes", n_classes)
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_model)
        self.rnn = RNN(d_model, d_model)
        self.readout = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> logits ``(B, n_classes)`` from ``h_T``."""
        check_tokens("tokens", tokens, self.vocab_size)
        _, h_last = self.rnn(self.embed(tokens))  # (B, d_model)
        return self.readout(h_last)

    def generate(self, prompt: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """Greedy generation that carries the hidden state: one recurrent step per new
        token (re-reading the prefix is never needed). Returns ``(B, T + n_tokens)``."""
        _check_positive_int("n_tokens", n_tokens)
        check_tokens("prompt", prompt, self.vocab_size)
        _, h = self.rnn(self.embed(prompt))  # (B, d_model)
        tokens = [prompt]
        for _ in range(n_tokens):  # token t + 1 needs token t: sequential
            next_token = self.readout(h).argmax(-1)  # (B,)
            tokens.append(next_token[:, None])
            h = self.rnn.step(self.embed(next_token), h)
        return torch.cat(tokens, dim=1)  # (B, T + n_tokens)


class LSTMReader(nn.Module):
    """Embedding, one ``torch.nn.LSTM`` layer, and a linear read-out of the last hidden state.

    The gated counterpart of :class:`RNNReader`, of the same width: its input, forget and
    output gates decide at every step what the cell state takes in, keeps and passes on (the
    input and output gates: Hochreiter and Schmidhuber, 1997; the forget gate: Gers et al., 2000). Its three gates and candidate cell state give it about four times
    the recurrent weights of :class:`RNNReader`.
    """

    def __init__(self, vocab_size: int, d_model: int, n_classes: int):
        super().__init__()
        _check_positive_int("vocab_size", vocab_size)
        _check_positive_int("d_model", d_model)
        _check_positive_int("n_classes", n_classes)
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_model)
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)
        self.readout = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> logits ``(B, n_classes)`` from ``h_T``."""
        check_tokens("tokens", tokens, self.vocab_size)
        _, (h_last, _) = self.lstm(self.embed(tokens))  # (1, B, d_model): one layer
        return self.readout(h_last[0])


class AttentionReader(nn.Module):
    """Embedding plus positions, one :class:`~aiayn.attention.MultiHeadAttention`, a linear read-out.

    Only the last position queries (it holds the question); every position is a key and
    a value. Attention by itself ignores order, so without ``positional`` the model could
    not tell which token is ``k`` steps back: ``"sinusoidal"`` adds the paper's encoding
    (Section 3.5), ``"learned"`` a trained table, ``"none"`` nothing.
    """

    def __init__(self, vocab_size: int, d_model: int, n_classes: int, n_heads: int = 1,
                 max_len: int = 512, positional: str = "sinusoidal"):
        super().__init__()
        _check_positive_int("vocab_size", vocab_size)
        _check_positive_int("n_classes", n_classes)
        if positional not in ("sinusoidal", "learned", "none"):
            raise ValueError(
                f"positional must be 'sinusoidal', 'learned' or 'none', got {positional!r}")
        self.vocab_size, self.max_len, self.positional = vocab_size, max_len, positional
        self.embed = nn.Embedding(vocab_size, d_model)
        if positional == "sinusoidal":
            self.position = PositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.5)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.readout = nn.Linear(d_model, n_classes)

    def _inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """The embedded tokens with their positions: ``(B, T, d_model)``."""
        check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        x = self.embed(tokens)
        if self.positional == "sinusoidal":
            return self.position(x)
        if self.positional == "learned":
            return x + self.table[: x.shape[1]]  # (T, D) broadcasts over B
        return x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> logits ``(B, n_classes)`` from the last position."""
        x = self._inputs(tokens)
        return self.readout(self.attn(x[:, -1:], x, x)[:, 0])  # one query, T keys

    def attention_weights(self, tokens: torch.Tensor) -> torch.Tensor:
        """Where the question looks: its weights over the ``T`` positions, averaged over the
        heads, ``(B, T)`` (each row sums to 1)."""
        x = self._inputs(tokens)
        return self.attn(x[:, -1:], x, x, need_weights=True)[1][:, :, 0].mean(1)  # (B, H, 1, T)


def greedy_generate(
    model: Callable[[torch.Tensor], torch.Tensor], prompt: torch.Tensor, n_tokens: int
) -> torch.Tensor:
    """Append ``n_tokens`` tokens to ``prompt`` ``(B, T)``, each the argmax of
    ``model(tokens)`` ``(B, n_classes)``: autoregressive generation, one token per call.

    Token ``t + 1`` cannot be computed before token ``t`` exists, whatever the model is.
    Returns ``(B, T + n_tokens)``.
    """
    _check_positive_int("n_tokens", n_tokens)
    tokens = prompt
    for _ in range(n_tokens):
        next_token = model(tokens).argmax(-1)  # (B,)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, T) -> (B, T + 1)
    return tokens
