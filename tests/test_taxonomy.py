"""The kernel rule table: every example lands on its own row, and real names are covered."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from analyze.taxonomy import KERNEL_RULES, classify_kernels, classify_name


@pytest.mark.parametrize("index", range(len(KERNEL_RULES)), ids=[f"{r[0]}-{r[1]}" for r in KERNEL_RULES])
def test_example_matches_own_rule_and_no_earlier(index):
    cat, sub, pattern, example = KERNEL_RULES[index]
    assert re.search(pattern, example, re.IGNORECASE)
    for earlier in KERNEL_RULES[:index]:
        assert not re.search(earlier[2], example, re.IGNORECASE), f"{example!r} is caught by earlier rule {earlier[:2]}"
    assert classify_name(example) == (cat, sub)


@pytest.mark.parametrize(
    "name, category",
    [
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            "gemm",
        ),
        ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm"),
        ("triton_tem_fused_mm_0", "gemm"),
        ("triton_poi_fused_add_mul_0", "elementwise"),
        ("triton_red_fused_sum_1", "reduction"),
        ("triton_per_fused__softmax_2", "softmax"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1>>(int)",
            "memory",
        ),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 3, 64, 64>(...)", "memory"),
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)]>",
            "memory",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, ...)",
            "normalization",
        ),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
        ("_fwd_flash_attention_kernel", "attention"),
        # torch 2.11 SDPA on an H200 (cuDNN backend) and this repo's Triton kernels, from run 10's traces
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
            "attention",
        ),
        ("cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*)", "attention"),
        ("cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int)", "attention"),
        ("_flash_bwd_dkdv_kernel", "attention"),
        ("_flash_bwd_delta_kernel", "attention"),
        (
            "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int)",
            "gemm",
        ),
        ("void at::native::convert_kernel<float>(float*)", "other"),  # "convert" is no convolution
        ("some_custom_kernel_nobody_knows", "other"),
    ],
)
def test_known_names(name, category):
    assert classify_name(name)[0] == category


def test_classify_kernels_is_vectorized_over_names():
    df = pd.DataFrame(
        {"demangled_name": pd.Categorical(["ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn", "mystery"])}
    )
    out = classify_kernels(df)
    assert list(out["category"]) == ["gemm", "gemm", "other"]
    assert list(out["subcategory"]) == ["dense", "dense", "other"]
