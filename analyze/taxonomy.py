"""Kernel categories as data: one ordered table of regex rules, first match wins.

Rules are matched, case-insensitively, against the demangled kernel name (which
carries the functor, e.g. ``MulFunctor``), falling back to the short name.
Order matters: attention precedes GEMM because ``fmha_cutlassF`` also matches
``cutlass`` (attention also takes the helpers of cuDNN's SDPA backward: ``dot_do_o``,
D = rowsum(dO * O), and ``convert_dq``, the fp32 dQ buffer cast back); memory precedes
elementwise because copy and fill kernels are elementwise launches; reduction precedes
elementwise because ``reduce_kernel`` names carry ``sum_functor``. To add a library's kernels, add a row with an
example; tests check every example lands on its own row and no earlier one.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

KERNEL_RULES = (  # first match wins
    # category        subcategory       pattern                                            example
    ("communication", "nccl", r"nccl|rccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)"),
    ("communication", "custom_collective", r"cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
     "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*, vllm::RankSignals, int)"),
    ("attention", "flash", r"flash|fmha|attn|attention|sdpa|\bmha_|dot_do_o|convert_dq",
     "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>"),
    ("optimizer", "multi_tensor", r"multi_tensor_apply|foreach|adam|lamb_|\bsgd",
     "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<2>, BinaryOpListAlphaFunctor<float, 2, 2, 0>>"),
    ("softmax", "softmax", r"softmax", "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, Epilogue>(float*, float const*, int)"),
    ("normalization", "norm", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|bn_fw|bn_bw|welford|rowwisemoments",
     "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)"),
    ("gemm", "convolution", r"conv(?!ert)|winograd|dgrad|wgrad|scudnn|fprop|implicit_gemm|cask_cudnn",
     "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int)"),
    ("gemm", "dense", r"gemm|gemv|xmma|cutlass|nvjet|wgmma|cublas|matmul|\bmm_|triton_tem|splitkreduce|tensorop|\bs1688|\bh1688",
     "ampere_sgemm_128x64_tn"),
    ("memory", "copy_layout", r"copy|memcpy|memset|cat_?array|index|gather|scatter|transpose|permute|fill|embedding|\bpad|im2col|col2im|nchw|nhwc|contiguous|unfold|\broll|flip|repeat",
     "void at::native::elementwise_kernel<128, 2, gpu_kernel_impl_nocast<direct_copy_kernel_cuda(TensorIteratorBase&)>>(int)"),
    ("reduction", "reduce", r"reduce|cub::|devicereduce|devicescan|triton_red|triton_per|\bscan|sort|radix|topk|argmax|argmin|pool|cumsum|norm_kernel|nll|criterion|cross_entropy|nvfuser_\w*(persistent|reduction)",
     "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>>(T3)"),
    ("elementwise", "pointwise", r"elementwise|triton_poi|nvfuser_pointwise|functor|pointwise|activation|relu|gelu|silu|sigmoid|tanh|dropout|threshold|clamp|where|scale|bias|add|mul|div|\bexp|pow|sqrt|neg|abs|\blog|\bsin|\bcos",
     "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, MulFunctor<float>>, std::array<char*, 3>>(int)"),
)  # fmt: skip

OTHER = ("other", "other")
CATEGORIES = tuple(dict.fromkeys(rule[0] for rule in KERNEL_RULES)) + (OTHER[0],)
_COMPILED = tuple((cat, sub, re.compile(pat, re.IGNORECASE)) for cat, sub, pat, _ in KERNEL_RULES)


def classify_name(name: str) -> tuple[str, str]:
    """Category and subcategory of one kernel name ("other" when no rule matches)."""
    for cat, sub, rx in _COMPILED:
        if rx.search(name):
            return cat, sub
    return OTHER


def classify_kernels(kernels: pd.DataFrame, name_column: str = "demangled_name") -> pd.DataFrame:
    """Return ``kernels`` with ``category`` and ``subcategory`` columns added.

    Vectorized over distinct names: each is matched once, then codes are mapped onto rows.
    """
    names = kernels[name_column].astype("category")
    labels = [classify_name(str(n)) for n in names.cat.categories]
    codes = names.cat.codes.to_numpy()
    # Codes per distinct name in int8 (at most a few dozen categories), so the per-kernel arrays are small.
    cat_codes = np.array([CATEGORIES.index(c) for c, _ in labels] + [CATEGORIES.index(OTHER[0])], dtype=np.int8)
    subs = pd.Index(sorted({s for _, s in labels} | {OTHER[1]}))
    sub_codes = np.array([subs.get_loc(s) for _, s in labels] + [subs.get_loc(OTHER[1])], dtype=np.int8)
    return kernels.assign(  # code -1 (a missing name) lands on the appended "other" entry
        category=pd.Categorical.from_codes(cat_codes[codes], categories=CATEGORIES),
        subcategory=pd.Categorical.from_codes(sub_codes[codes], categories=subs),
    )


def classify_memops(memops: pd.DataFrame) -> pd.DataFrame:
    """Memcpy and memset operations are category "memory", subcategory their kind."""
    memory = np.full(len(memops), CATEGORIES.index("memory"), dtype=np.int8)
    return memops.assign(
        category=pd.Categorical.from_codes(memory, categories=CATEGORIES),
        subcategory=memops["kind"].astype(str).astype("category"),
    )
