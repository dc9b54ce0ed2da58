"""Generated tasks for the chapters. No downloads: every data set is generated, seeded
and reproducible."""

from __future__ import annotations

import torch  # noqa: F401  (used by the task generators appended below)

__all__: list[str] = []


# ------------------------------------------------ chapter 5: a task where position matters

IGNORE_INDEX = -100  # the target id that torch.nn.functional.cross_entropy skips by default


def previous_token_task(
    batch_size: int,
    length: int,
    vocab_size: int,
    offset: int = 1,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens; the target at position ``p`` is the token at ``p - offset``.

    Content alone cannot solve it: every token is drawn uniformly from ``[0, vocab_size)``,
    so a model must find *which* position is ``offset`` to the left, a purely relative
    question. The first ``offset`` positions have no such token and get ``IGNORE_INDEX``.
    Returns ``(inputs, targets)``, both ``(batch_size, length)`` int64.
    """
    for name, value in (("batch_size", batch_size), ("length", length),
                        ("vocab_size", vocab_size), ("offset", offset)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if length <= offset:
        raise ValueError(f"length must exceed offset={offset} (else nothing to predict), got {length}")
    inputs = torch.randint(vocab_size, (batch_size, length), generator=generator)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, offset:] = inputs[:, :-offset]  # shift right by `offset`
    return inputs.to(device), targets.to(device)
