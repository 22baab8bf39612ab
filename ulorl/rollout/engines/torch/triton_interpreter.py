"""Triton's interpreter (`TRITON_INTERPRET=1`, how the tests run our Triton kernels on CPU) mended for NumPy 2.4.

Under the interpreter every scalar is a one-element array, and `range(lo, hi)` over scalars (a kernel's loop
bounds) calls `int(array)`, which NumPy 2.4 refuses for arrays of one dimension. `patch_interpreter` converts
through the array's single item instead; the kernels' modules call it at import, and it does nothing when the
interpreter is off or already mended.
"""

from __future__ import annotations

from ulorl.rollout.engines.torch.table_attention import triton_interpreting


def patch_interpreter() -> None:
    """Mend the interpreter's `__index__` of scalars (Triton 3.6 and later set the interpreter's tensor attributes
    through a scope, undone after the launch; 3.5 on the class itself)."""
    if not triton_interpreting():
        return
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "_ulorl_wrapped", False):
        return

    def index(self) -> int:
        return int(self.handle.data.reshape(-1)[0])

    def patched(tensor, *scope) -> None:
        patch(tensor, *scope)
        if scope:
            scope[0].set_attr(tensor, "__index__", index)
        else:
            tensor.__index__ = index

    patched._ulorl_wrapped = True
    interpreter._patch_lang_tensor = patched
