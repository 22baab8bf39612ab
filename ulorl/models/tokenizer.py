"""The built-in tokenizer, built in code with the `tokenizers` library (no downloads).

A WordPiece tokenizer whose vocabulary holds the built-in task's words, the numbers
0..255 as single tokens, and every printable ASCII character (plus its `##`
continuation form), so *any* ASCII text round-trips up to whitespace: known words
are one token, unknown words fall back to characters. Chat turns use Qwen's
`<|im_start|>` / `<|im_end|>` markers, and `<|im_end|>` is the end-of-sequence token.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, UNK, EOT, IM_START, IM_END = "<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, UNK, EOT, IM_START, IM_END]
TASK_WORDS = ["user", "assistant", "system", "chain", "start", "mul", "add", "steps", "answer"]
MAX_NUMBER_TOKEN = 255

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_vocab() -> dict[str, int]:
    """Return the token -> id map: specials, task words, numbers, characters, `##`characters."""
    words: list[str] = list(SPECIAL_TOKENS) + TASK_WORDS
    words += [str(i) for i in range(MAX_NUMBER_TOKEN + 1)]
    chars = [c for c in string.printable if not c.isspace()]
    words += [c for c in chars if c not in words]
    words += ["##" + c for c in chars]
    vocab: dict[str, int] = {}
    for w in words:
        vocab.setdefault(w, len(vocab))
    return vocab


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Build the built-in tokenizer as a `transformers` fast tokenizer with a chat template."""
    vocab = build_vocab()
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=UNK, max_input_chars_per_word=1000))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=IM_END,
        bos_token=None,
        additional_special_tokens=[EOT, IM_START],
        model_max_length=1 << 20,
        padding_side="left",
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf
