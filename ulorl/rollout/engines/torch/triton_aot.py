"""Our Triton kernels (decode attention, the fused sampler) compiled ahead of time for a CUDA architecture, on a
machine without a GPU.

Triton ships NVIDIA's assembler (ptxas) and cuobjdump with its CUDA backend, so the whole compile (Triton IR ->
PTX -> cubin) runs anywhere. `compile_decode` builds the launches `triton_decode.paged_decode` would make for
given shapes (`decode_launches`, the same function), `compile_sample` the fused sampler's
(`triton_sampler.sample_launch`), specialises their arguments as Triton's JIT does at launch
(argument types, 16-byte alignment and divisibility hints, integers equal to 1 as constants), compiles them for
`arch` and reads back what a launch would check or cost:

- the dynamic shared memory the kernel requests (a launch above the device's per-block limit fails with Triton's
  `OutOfResources`; `SHARED_LIMIT_BYTES`);
- registers and local memory (register spills) per thread, from ptxas's cubin (`cuobjdump -res-usage`).

This checks, without a GPU, what the CPU tests' way of running the kernels (Triton's interpreter) cannot: that the
real compiler accepts them (the interpreter runs programs the compiler rejects) and that their tiles fit the
device. It times nothing. The specialisation uses Triton's JIT internals (`create_function_from_signature`,
`JITFunction._pack_args`, as in Triton 3.6); a Triton without them gets a clear error.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

# the most dynamic shared memory one block may opt into, by compute capability (CUDA programming guide, "Features
# and Technical Specifications"): A100 163 KB, sm_86 / sm_89 99 KB, H100 / H200 227 KB
SHARED_LIMIT_BYTES = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}


@dataclass
class KernelBuild:
    """One kernel compiled for `arch` (sm_XY as XY), and its resources per launch."""

    kernel: str
    arch: int
    shared_bytes: int  # dynamic shared memory per block
    registers: int  # per thread
    local_bytes: int  # local memory per thread: register spills (0: none)
    shared_limit: int | None  # SHARED_LIMIT_BYTES[arch] (None: not in the table)

    @property
    def fits(self) -> bool:
        """Whether a launch on a device of this architecture gets its shared memory."""
        return self.shared_limit is None or self.shared_bytes <= self.shared_limit

    def as_dict(self) -> dict:
        return {**asdict(self), "fits": self.fits}


def _triton_parts():
    """Triton's pieces used here, or an ImportError that says what is missing."""
    try:
        import triton
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend
        from triton.compiler import ASTSource
        from triton.runtime.jit import create_function_from_signature
    except ImportError as e:
        raise ImportError(f"compiling the decode kernels ahead of time needs triton with its CUDA backend (3.6 was "
                          f"used to write this): {e}") from e
    if not hasattr(knobs.compilation, "instrumentation_mode"):  # 3.5 has `knobs` without it
        raise ImportError(f"compiling the decode kernels ahead of time needs triton >= 3.6 (its compile options); "
                          f"this is triton {triton.__version__}")
    return triton, knobs, GPUTarget, CUDABackend, ASTSource, create_function_from_signature


def aot_unavailable() -> str | None:
    """Why this Triton cannot compile the kernels ahead of time (the message `compile_decode` would raise), or
    None when it can."""
    try:
        _triton_parts()
    except ImportError as e:
        return str(e)
    return None


def resource_usage(cubin: bytes, kernel: str) -> tuple[int, int]:
    """(registers, local bytes) per thread of `kernel` in `cubin`, as `cuobjdump -res-usage` prints them."""
    _, knobs, *_ = _triton_parts()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{kernel}.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", str(path)], capture_output=True, text=True,
                              check=True).stdout
    m = re.search(rf"Function {re.escape(kernel)}:\s*\n\s*REG:(\d+) STACK:\d+ SHARED:\d+ LOCAL:(\d+)", text)
    if m is None:
        raise RuntimeError(f"cuobjdump -res-usage printed no usage for {kernel}:\n{text}")
    return int(m.group(1)), int(m.group(2))


def compile_launch(launch, arch: int = 90) -> KernelBuild:
    """Compile one `triton_launch.Launch` for sm_`arch`, specialised on its arguments as the JIT would at launch."""
    triton, knobs, GPUTarget, CUDABackend, ASTSource, create_binder = _triton_parts()
    fn = launch.kernel
    if not hasattr(fn, "_pack_args"):
        from ulorl.rollout.engines.torch.table_attention import triton_interpreting

        why = ("Triton's interpreter is on (unset TRITON_INTERPRET to compile kernels)" if triton_interpreting() else
               f"this Triton's JIT ({triton.__version__}) has no `_pack_args` (written against Triton 3.6)")
        raise RuntimeError(f"{getattr(fn, '__name__', fn)} cannot be compiled ahead of time: {why}")
    target = GPUTarget("cuda", arch, 32)
    backend = CUDABackend(target)
    kwargs = dict(launch.kwargs, debug=bool(fn.debug or knobs.runtime.debug),
                  instrumentation_mode=knobs.compilation.instrumentation_mode)
    bound, specialization, options = create_binder(fn.signature, fn.params, backend)(*launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
    name = compiled.metadata.name
    registers, local = resource_usage(compiled.asm["cubin"], name)
    return KernelBuild(name, arch, compiled.metadata.shared, registers, local, SHARED_LIMIT_BYTES.get(arch))


def compile_decode(dtype: torch.dtype, kv_heads: int, group: int, head_dim: int, block_size: int = 64,
                   rows: int = 256, width: int = 64, splits: int = 1, num_warps: int = 4, num_stages: int = 2,
                   arch: int = 90) -> list[KernelBuild]:
    """Both kernels of one `paged_decode` call: `rows` rows of `kv_heads` x `group` query heads of `head_dim`, KV in
    blocks of `block_size`, tables `width` blocks wide, `splits` slices per row, in `dtype` (the engine's).
    The tensors are CPU stand-ins of the launch's shapes, strides and dtypes; nothing runs."""
    from ulorl.rollout.engines.torch.triton_decode import decode_launches

    q = torch.zeros(rows, kv_heads, group, head_dim, dtype=dtype)
    k_tokens = torch.zeros(kv_heads, (width + 1) * block_size, head_dim, dtype=dtype)
    table = torch.zeros(rows, width, dtype=torch.long)
    ctx = torch.ones(rows, dtype=torch.long)
    launches, _ = decode_launches(q, k_tokens, torch.zeros_like(k_tokens), table, ctx, block_size, head_dim ** -0.5,
                                  splits, num_warps, num_stages)
    return [compile_launch(launch, arch) for launch in launches]


def compile_sample(dtype: torch.dtype, rows: int = 256, vocab: int = 151936, arch: int = 90) -> list[KernelBuild]:
    """The fused sampler's kernel (`triton_sampler.sample_launch`) for `rows` rows of `vocab` logits in `dtype`."""
    from ulorl.rollout.engines.torch.triton_sampler import sample_launch

    launch, _, _ = sample_launch(torch.zeros(rows, vocab, dtype=dtype), 0.85, torch.zeros(rows, dtype=torch.float64))
    return [compile_launch(launch, arch)]
