"""The kernel rule table: every example is decided by its own row, real names land where they belong."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.taxonomy import (
    CATEGORIES,
    KERNEL_RULES,
    OTHER,
    _subjects,
    _words,
    classify_kernels,
    classify_memops,
    classify_name,
    rule_index,
)

CORPUS = Path(__file__).parent / "data" / "kernel_names" / "corpus.csv"
SOURCE_KINDS = ("capture", "capture (shared/data)", "pasted capture", "library kernel list")
HELD_OUT = Path(__file__).parents[1] / ".." / "shared" / "data" / "HELD_OUT_SOURCES.md"
EXAMPLES = [(i, ex) for i, rule in enumerate(KERNEL_RULES) for ex in rule[3]]


def read_corpus() -> list[dict[str, str]]:
    with CORPUS.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    "index, example", EXAMPLES, ids=[f"{KERNEL_RULES[i][1]}-{n}" for n, (i, _) in enumerate(EXAMPLES)]
)
def test_example_is_decided_by_its_own_row(index, example):
    won = rule_index(example)
    assert won == index, f"{example[:80]!r} is decided by row {won} {KERNEL_RULES[won][:2] if won >= 0 else OTHER}"
    assert classify_name(example) == KERNEL_RULES[index][:2]


def test_every_rule_category_is_listed_and_cuda_graph_is_first():
    assert {rule[0] for rule in KERNEL_RULES} <= set(CATEGORIES)
    assert CATEGORIES[-1] == OTHER[0] and len(set(CATEGORIES)) == len(CATEGORIES)
    assert KERNEL_RULES[0][:2] == ("cuda graph", "graph_launch")  # CONTRACT.md


# The four misclassifications seen on real captures (issue 20), each with the name that showed it.
def test_tensile_tuning_token_onll1_is_no_nll_loss():
    # AMD ROCm Qwen3-8B trace: Tensile's "ONLL1" matched the reduction rule's "nll" -> "GEMM 0.0%".
    name = (
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
        "CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LDSTI0_LBSPPA128_"
        "LBSPPB128_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT4_4_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS0_"
        "NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW8_SK0_SKFTR0_SKXCCM0_TLDS1_ULSGRO0_USL1_"
        "UIOFGRO0_USFGRO0_VSn1_VWA8_VWB8_WSGRA0_WSGRB0_WS64_WG32_8_1"
    )
    assert classify_name(name) == ("gemm", "dense")
    assert classify_name(name + ".kd")[0] == "gemm"  # rocprof's code-object suffix
    assert "nll" not in _words(name).split()  # the boundary: ONLL1 is the words "onll 1"


@pytest.mark.parametrize(
    "name",
    [
        "bmm_E4m3E4m3_Fp32_t128x128x128u2_s6_et64x32_m128x128x32_cga1x1x1_16dp256b_TN_schedS",
        "bmm_Bfloat16_Bfloat16_Fp32_t128x128x64u2_s6_et64x32_m128x128x16_cga1x1x1_16dp256b_TN_schedS",
    ],
)
def test_b200_bmm_kernels_are_gemm(name):
    # B200 trace: "\bmm_" did not match a name that starts with "bmm_".
    assert classify_name(name) == ("gemm", "dense")


def test_miopen_sub_tensor_op_is_pointwise_not_gemm():
    # "tensorop" (CUTLASS's Tensor Core token) matched MIOpen's SubTensorOpWithScalar1d.
    assert classify_name("SubTensorOpWithScalar1d") == ("elementwise", "pointwise")
    assert classify_name("void SubTensorOpWithScalar1d<float>(float*, float, int, int)")[0] == "elementwise"


@pytest.mark.parametrize(
    "name",
    [
        "void fbgemm_gpu::(anonymous namespace)::split_embedding_codegen_forward_unweighted_kernel"
        "<float, float, (fbgemm_gpu::PoolingMode)0, long, 8, 4>(fbgemm_gpu::TensorAccessor<float, 1>, int)",
        "void split_embedding_codegen_forward_unweighted_kernel<float, float, long, 8, 4>(int)",
        "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"
        "<float, float, float, 8, fbgemm_gpu::FixedDivisor>(int)",
    ],
)
def test_fbgemm_embedding_is_memory_with_or_without_fbgemm_template_arguments(name):
    # "fbgemm_gpu::" in template arguments sent the family to gemm, the same family without it to memory.
    assert classify_name(name) == ("memory", "embedding")


def test_rules_read_the_own_name_not_template_arguments_or_parameters():
    # A reduction whose template argument is a GEMM type, a copy whose parameter says softmax.
    assert (
        classify_name("void at::native::reduce_kernel<512, 1, GemmLikeOp<float>>(GemmLikeOp<float>)")[0] == "reduction"
    )
    assert classify_name("void my_copy_kernel<float>(SoftmaxParams, float*)")[0] == "memory"
    # ...except generic launchers, which are named by the kernel or functor they run.
    assert classify_name("void cutlass::device_kernel<flash::FlashAttnFwdSm90<int>>(int)")[0] == "attention"
    assert (
        classify_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)")[0]
        == "memory"
    )
    assert classify_name("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)")[
        0
    ] == ("elementwise")


@pytest.mark.parametrize(
    "text, words",
    [
        ("cunn_SoftMaxForward", "cunn soft max forward"),
        ("RMSNormKernel", "rms norm kernel"),
        ("Cijk_Alik_Bljk_ONLL1_PGR2", "cijk alik bljk onll 1 pgr 2"),
        ("bmm_E4m3E4m3_Fp32", "bmm e 4 m 3 e 4 m 3 fp 32"),
        ("MIOpenBatchNormFwdTrainSpatial", "mi open batch norm fwd train spatial"),
    ],
)
def test_words_split_at_every_identifier_boundary(text, words):
    assert _words(text) == words


def test_signature_parsing_strips_return_type_namespaces_templates_and_parameters():
    assert _subjects("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, int)") == [
        "cunn soft max forward",
        "at native anon cunn soft max forward",
    ]
    # nsys prints SFINAE return types whose condition holds a bare ">"
    name = "std::enable_if<T2>(int)0&&vllm::_typeConvert<T1>::exists, void>::type vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(T1 *, int)"
    assert _subjects(name)[0] == "fused add rms norm kernel"
    # a mangled name (Kineto keeps some unmangled) is read for the same parts
    assert (
        _subjects("_ZN5aiter39bf16gemm_fp32bf16_tn_64x64_splitk_cleanE")[0]
        == "bf 16 gemm fp 32 bf 16 tn 64 x 64 splitk clean"
    )
    assert _subjects("__amd_rocclr_copyBuffer.kd") == ["amd rocclr copy buffer"]


def test_cuda_graph_rows_follow_the_contract():
    assert classify_name("[CUDA graph 3]") == ("cuda graph", "graph_launch")
    assert classify_name("[cuda graph 17]") == ("cuda graph", "graph_launch")


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
        # "convert" is no convolution; a dtype conversion is pointwise (was "other" before names were
        # split into words: then only whole substrings like "conv(?!ert)" were tried)
        ("void at::native::convert_kernel<float>(float*)", "elementwise"),
        ("some_custom_kernel_nobody_knows", "other"),
    ],
)
def test_known_names(name, category):
    assert classify_name(name)[0] == category


def test_classify_kernels_is_vectorized_over_names():
    df = pd.DataFrame(
        {"demangled_name": pd.Categorical(["ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn", "mystery", None])}
    )
    out = classify_kernels(df)
    assert list(out["category"]) == ["gemm", "gemm", "other", "other"]
    assert list(out["subcategory"]) == ["dense", "dense", "other", "other"]
    assert list(out["category"].cat.categories) == list(CATEGORIES)


def test_classify_memops_is_memory():
    out = classify_memops(pd.DataFrame({"kind": ["memcpy_htod", "memset"]}))
    assert list(out["category"]) == ["memory", "memory"]
    assert list(out["subcategory"]) == ["memcpy_htod", "memset"]


# --- the corpus: real kernel names from public captures (tests/data/kernel_names/README.md) ---


def test_corpus_names_are_distinct_labelled_and_sourced():
    rows = read_corpus()
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names)) >= 2000
    assert {r["category"] for r in rows} <= set(CATEGORIES)
    assert {r["source_kind"] for r in rows} <= set(SOURCE_KINDS)
    # issue 20: at least 2,000 names from public captures, not from one library's kernel list
    assert sum(r["source_kind"] != "library kernel list" for r in rows) >= 2000
    assert all(r["source_repo"].count("/") == 1 and r["source_path"] and r["license"] for r in rows)


def test_corpus_takes_held_out_repositories_only_through_shared_data():
    if not HELD_OUT.exists():
        pytest.skip("../shared/data/HELD_OUT_SOURCES.md is absent")
    held = {line[2:].strip() for line in HELD_OUT.read_text().splitlines() if line.startswith("- ")}
    offending = {
        r["source_repo"]
        for r in read_corpus()
        if r["source_repo"] in held and r["source_kind"] != "capture (shared/data)"
    }
    assert not offending


def test_every_corpus_name_lands_in_its_category():
    rows = read_corpus()
    got = classify_kernels(pd.DataFrame({"demangled_name": [r["name"] for r in rows]}))["category"].astype(str)
    wrong = [(r["category"], g, r["name"][:100]) for r, g in zip(rows, got, strict=True) if r["category"] != g]
    assert not wrong, f"{len(wrong)} of {len(rows)} names land elsewhere, e.g. {wrong[:5]}"


def test_other_share_on_the_corpus(capsys):
    """Prints the share left in "other", overall and for captured names alone (the figures the README quotes)."""
    rows = read_corpus()
    other = [r for r in rows if classify_name(r["name"]) == OTHER]
    families = {_subjects(r["name"])[0].split(" ")[0] for r in rows}
    other_families = {_subjects(r["name"])[0].split(" ")[0] for r in other}
    captured = [r for r in rows if r["source_kind"] != "library kernel list"]
    captured_other = [r for r in other if r["source_kind"] != "library kernel list"]
    with capsys.disabled():
        print(
            f"\nkernel-name corpus: {len(other)} of {len(rows)} names in 'other' ({100 * len(other) / len(rows):.1f}%); "
            f"captures only {len(captured_other)} of {len(captured)} ({100 * len(captured_other) / len(captured):.1f}%); "
            f"first words {len(other_families)} of {len(families)}; by category {dict(Counter(r['category'] for r in rows))}; "
            f"by source kind {dict(Counter(r['source_kind'] for r in rows))}"
        )
    assert len(other) / len(rows) < 0.02
    assert len(captured_other) / len(captured) < 0.05  # captures hold the project-specific kernels


def test_classify_kernels_maps_each_distinct_name_onto_its_rows():
    names = [r["name"] for r in read_corpus()]
    codes = np.tile(np.arange(len(names)), 50)
    out = classify_kernels(pd.DataFrame({"demangled_name": pd.Categorical.from_codes(codes, categories=names)}))
    per_name = np.array([classify_name(n)[0] for n in names], dtype=object)
    assert (out["category"].astype(str).to_numpy() == per_name[codes]).all()
