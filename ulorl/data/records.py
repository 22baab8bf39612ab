"""What loading produces: one `PromptRecord` per usable row, a `LoadReport`, and `DataError`.

All validation happens at load time (before training starts), so reading records
later can never fail mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ulorl.errors import UlorlError


def counted(n: int, noun: str) -> str:
    """`n` and the noun, plural unless n is 1: counted(1, "bad row") == "1 bad row"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class DataError(UlorlError, ValueError):
    """A dataset row (or file) that cannot be used; the message names file, row and field."""


@dataclass
class PromptRecord:
    """One prompt ready for rollout.

    `prompt_id` is the row's 0-based index in its source (stable across runs and
    shuffles); `prompt_tokens` is the rendered prompt (chat template applied when the
    tokenizer has one) and `prompt_text` the same prompt as text.
    """

    prompt_id: int
    prompt_tokens: list[int]
    prompt_text: str
    ground_truth: str
    data_source: str
    extra_info: dict = field(default_factory=dict)


@dataclass
class RowIssue:
    """Why one row is unusable: the field, what was expected and a reason key for counting."""

    row: int
    field: str
    # missing_field | wrong_type | empty_prompt | undecodable_text | nul_character | non_finite | bad_messages |
    # invalid_json | line_too_long
    reason: str
    expected: str
    got: str = ""

    def message(self, source: str) -> str:
        got = f", got {self.got}" if self.got else ""
        return f"{source}: row {self.row}, field '{self.field}': expected {self.expected}{got} [{self.reason}]"


MAX_EXAMPLES = 5


@dataclass
class LoadReport:
    """What happened to the rows of one source.

    n_rows = n_loaded + n_skipped + n_too_long. `skipped_by_reason` counts bad rows by
    reason key; `examples` keeps the first few bad-row messages; `too_long_ids` the
    first few prompt ids dropped for exceeding `max_prompt_len`.
    """

    source: str
    n_rows: int = 0
    n_loaded: int = 0
    n_skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    n_too_long: int = 0
    too_long_ids: list[int] = field(default_factory=list)
    parts: list[LoadReport] = field(default_factory=list)  # one report per source when several were loaded

    @classmethod
    def combine(cls, parts: list[LoadReport]) -> LoadReport:
        """The totals of several sources' reports, keeping each one in `parts` (one source: itself)."""
        if len(parts) == 1:
            return parts[0]
        total = cls(source=" + ".join(p.source for p in parts), parts=list(parts))
        for p in parts:
            total.n_rows += p.n_rows
            total.n_loaded += p.n_loaded
            total.n_skipped += p.n_skipped
            total.n_too_long += p.n_too_long
            for k, v in p.skipped_by_reason.items():
                total.skipped_by_reason[k] = total.skipped_by_reason.get(k, 0) + v
            total.examples += p.examples[: MAX_EXAMPLES - len(total.examples)]
        return total

    def add_bad(self, issue: RowIssue) -> None:
        self.n_skipped += 1
        self.skipped_by_reason[issue.reason] = self.skipped_by_reason.get(issue.reason, 0) + 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(issue.message(self.source))

    def nothing_usable(self, max_len_key: str, max_len: int) -> DataError:
        """The error of a load that kept no prompt: the summary, and the setting to raise when prompts were dropped
        as too long (`max_len_key`, e.g. `data.max_prompt_len` or eval's `--max-prompt-len`, set to `max_len`)."""
        hint = f"; raise {max_len_key} (now {max_len:,} tokens) to keep the long ones" if self.n_too_long else ""
        return DataError(f"{self.summary()}: no usable prompts{hint}")

    def add_too_long(self, prompt_id: int) -> None:
        self.n_too_long += 1
        if len(self.too_long_ids) < MAX_EXAMPLES:
            self.too_long_ids.append(prompt_id)

    def summary(self) -> str:
        """One line for logs (several sources: the totals, then one line per source)."""
        if self.parts:
            lines = [f"{len(self.parts)} sources: {self.n_loaded}/{self.n_rows} rows loaded, "
                     f"{counted(self.n_skipped, 'bad row')} skipped, {counted(self.n_too_long, 'prompt')} too long "
                     "dropped"]
            return "\n".join(lines + [f"  {p.summary()}" for p in self.parts])
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped_by_reason.items()))
        return (f"{self.source}: {self.n_loaded}/{self.n_rows} rows loaded, {counted(self.n_skipped, 'bad row')} "
                f"skipped{f' ({reasons})' if reasons else ''}, {counted(self.n_too_long, 'prompt')} too long dropped")
