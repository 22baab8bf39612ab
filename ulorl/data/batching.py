"""Rows of different lengths grouped into padded batches under a token budget (the SFT's batches, the exact
measure's forwards)."""

from __future__ import annotations


def bucket_batches(lengths: list[int], token_budget: int, max_seqs: int) -> list[list[int]]:
    """Indices grouped by similar length so that `len(batch) * max_len <= token_budget` (a row longer than the
    budget alone), at most `max_seqs` a batch; shortest first; no rows, no batches."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if batches and (len(batches[-1]) + 1) * lengths[i] <= token_budget and len(batches[-1]) < max_seqs:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches
