"""Kernel categories as data: one ordered table of regex rules, first match wins.

Rules match the kernel's OWN name, not its template arguments or parameters: the
function name of a demangled signature (``void ns::fn<args>(params)`` gives ``fn``;
a mangled ``_ZN...`` name is read for the same parts), cut into lowercase words at
every boundary a name can have: underscores and other punctuation, camelCase
(``SoftMaxForward`` -> ``soft max forward``, ``RMSNorm`` -> ``rms norm``) and
letter/digit changes (``ONLL1`` -> ``onll 1``, ``bf16`` -> ``bf 16``). Patterns are
written against those words with ``\\b``, so Tensile's tuning token ``ONLL1`` is no
``nll`` and ``bmm_E4m3`` is the word ``bmm``.

Each name gives up to three subjects, tried in order; the first subject that any rule
matches decides:

1. generic launchers (``cutlass::device_kernel<K>``, ``cutlass::Kernel2<K>``,
   ``ck_tile::kentry<n, K>``, ATen's ``vectorized_elementwise_kernel<4, Functor>`` ...) are
   named by their first type argument ``K``/``Functor``, read the same way (recursively);
2. the function name itself;
3. the function name with its namespaces (``dpsk::ep::internode::dispatch``): a namespace
   only speaks when the function name says nothing a rule knows.

To add a library's kernels, add a row (or an example to a row) with a real name; tests
check every example is decided by its own row, and every name of the corpus
tests/data/kernel_names/corpus.csv (3,402 real names: 2,120 from captures of many vendors and
generations, 1,282 from ROCm/aiter's kernel tables) lands in the category it was labelled with.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

KERNEL_RULES = (  # first match wins; patterns match the words of the kernel's own name (see module docstring)
    # category, subcategory, pattern, examples: real kernel names this row must decide (tests check each one)
    # CONTRACT.md: a CUDA graph launch recorded at graph level is one row named "[CUDA graph N]".
    ("cuda graph", "graph_launch", r"^cuda graph( \d+)?$", ("[CUDA graph 12]",)),
    ("communication", "nccl", r"\b(nccl|rccl|msccl)",
     ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)",
      "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
      "void ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*) [clone .kd]")),  # RCCL
    ("communication", "custom_collective",
     r"cross device reduce|\ball ?(reduce|gather|to ?all)|\breduce ?scatter|\ball 2 all|one ?shot|two ?shot|custom ar|\blamport",
     ("void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*, vllm::RankSignals, int)",)),
    # Expert-parallel all-to-all (DeepEP and its relatives): the function is just "dispatch" or
    # "combine", so this row speaks through the namespace (subject 3).
    ("communication", "ep_all_to_all",
     r"\b(ep|deep ep|internode|intranode|low latency)\b.*\b(dispatch|combine|notify)|\bdispatch layout",
     ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*)",
      "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)")),
    # Writes into a paged KV cache are copies; before attention because vLLM calls them
    # reshape_and_cache_flash.
    ("memory", "kv_cache",
     r"reshape and cache|concat and cache|\bcopy blocks|\bswap blocks|\bstore kv|\bset kv|\bwrite kv|\bkv cache (write|store|copy|append)|\bkv append|\bbatch major kv cache",
     ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(long const*)",
      "kv_append_t.kd",
      # FasterTransformer / RTP-LLM write the new K and V into the paged cache in batch-major layout
      "void fastertransformer::transpose4dBatchMajorKVCache<__half, __half, fastertransformer::KVBlockArray>(__half const*, __half const*, fastertransformer::KVBlockArray, int, int, int, float const*, int const*, int const*)")),
    # FlashAttention 2 (flash_fwd_kernel) and 3 (cutlass::device_kernel<flash::FlashAttnFwdSm90>), cuDNN's
    # SDPA engines and their dO*O / dQ helpers, FlashInfer, xFormers fmha, aiter's asm fmha/mla/pa (the word pa is
    # paged attention), Gated DeltaNet (gdn_*, llama.cpp's gated_delta_net, FLA's *gated_delta_rule*: a
    # linear-attention layer, its causal conv included).
    # Before GEMM: fmha_cutlassF_* also says cutlass.
    ("attention", "flash",
     r"flash|fmha|\bmha\b|\bmla\b|attn|attention|sdpa|\bxqa\b|dot do o|convert dq|\bpaged|\bkv cache|merge states|decode with|prefill with|\bpa\b|\bgqa\b|\bmqa\b|\bgdn\b|\bgated delta (net|rule)",
     ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>",
      "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, cute::C<192> >, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, true> >(flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, cute::C<192> >, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, true>::Params)",
      "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
      "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, 4u, 8u, 8u, 1u, 1u, (flashinfer::PosEncodingMode)0, __half, __half, __half, float, int, flashinfer::DefaultAttention<false, false, false, false> >, flashinfer::BatchPrefillPagedParams<__half, __half, __half, int> >(flashinfer::BatchPrefillPagedParams<__half, __half, __half, int>)",
      "fmha_cutlassF_bf16_aligned_64x64_rf_sm80",
      "_ZN5aiter31pa_bf16_pertokenFp8_gqa8_2tg_4wE",
      "void kn_get_pa_metadata_v1_2<PaMetadataV12Traits<128, false, 1, true, false> >(PaMetadataV1KernelParameter)",
      "gdn_conv_t2.kd",
      "void gated_delta_net_cuda<128, false, false>(float const*, float const*, float const*, float const*, float const*, float const*, float*, float*, long, long, long, long, long, long, long, long, long, long, long, long, HIP_vector_type<unsigned int, 3u>, HIP_vector_type<unsigned int, 3u>, float, long, int)")),  # llama.cpp HIP, gfx1151
    # MoE routing picks the top-k experts per token: a selection, counted with reductions. Before
    # softmax because vLLM's router is topkGatingSoftmax (aiter's: topksoftmax).
    ("reduction", "moe_routing",
     r"\btop ?k ?(gating|softmax)|\bgrouped top ?k|\bmoe (fused )?gate|\bmoe top ?k|\bfused top ?k|\brouting|\brouter|\bbiased grouped|\bnoaux tc|\bgating",
     ("void vllm::moe::topkGatingSoftmax<4, 128, 4, 16, int>(float const*, bool const*, float*, int, int*, int, int, int)",
      "void moe_fused_gate_kernel<float, 256, 8, 32, 256>(void*, void*, float*, int*, int, int, int, int, bool, double)",  # SGLang
      "_ZN5aiter19topksoftmax_4x128x4E")),
    # Token permutation for experts (sort by expert, scatter to expert order and back): vLLM, TensorRT-LLM,
    # CK tile's MoeSorting, DeepSeek's expand/count kernels.
    ("memory", "moe_permute",
     r"\bmoe (align|sort|sum|permute|unpermute)|\b(un)?permute|expand (input rows|to)|finalize moe|\bcount and sort|\bexpert (map|offsets|counts?)|\bcount expert|\bmoe (token )?(sorting|align)",
     ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long)",
      "void tensorrt_llm::kernels::expandInputRowsKernel<__nv_bfloat16>(__nv_bfloat16 const*, __nv_bfloat16*, int const*, int*, long, long, int, long const*)",
      "void ck_tile::kentry<2, ck_tile::MoeSortingMultiPhaseKernel_P1<ck_tile::MoeSortingProblemMp<int, float, unsigned char, 16, false, false, true> >, ck_tile::MoeSortingMultiPhaseKernel_P1<ck_tile::MoeSortingProblemMp<int, float, unsigned char, 16, false, false, true> >::Kargs>(ck_tile::MoeSortingMultiPhaseKernel_P1<ck_tile::MoeSortingProblemMp<int, float, unsigned char, 16, false, false, true> >::Kargs) [clone .kd]")),
    # Fused and grouped-GEMM MoE: vLLM/SGLang's Triton fused_moe_kernel, aiter's fmoe_* asm kernels,
    # DeepSeek's grouped_gemm (its GemmKernel is a plain GEMM and lands on the dense row).
    ("gemm", "grouped_moe",
     r"\bf ?moe\b|fused moe|\bmoe stage|\bmoe (gemm|mlp|kernel|wna 16|marlin)|grouped (gemm|mm|matmul)|\bgroup gemm|moe gemm|\bcutlass moe|\bexpert gemm",
     ("fused_moe_kernel",
      "_ZN5aiter40fmoe_bf16_blockscaleFp8_g1u1_gelu_64x128E",
      "hk_moe_stage1_fp8_fused_act_kernel(__hip_bfloat16 const*, __hip_fp8_e4m3_fnuz const*, float const*, __hip_bfloat16*, int const*, int const*, int const*, int, int, int, int, int, int, int, int, int, int) [clone .kd]")),
    # Embedding lookups and their backward (FBGEMM split_embedding_*, which fuses a rowwise optimizer into
    # the backward: before the optimizer row) move rows: memory. Not rotary embeddings (pointwise).
    ("memory", "embedding", r"(?<!rotary )embedding|\bembedding bag",
     ("void fbgemm_gpu::(anonymous namespace)::split_embedding_codegen_forward_unweighted_kernel<float, float, (fbgemm_gpu::PoolingMode)0, long, 8, 4>(int)",
      "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float, float, float, 8, fbgemm_gpu::FixedDivisor>(int)")),
    ("optimizer", "multi_tensor", r"multi tensor apply|\bforeach\b|\badam|\blamb\b|\bsgd\b|\badagrad|\bmuon|\blion\b",
     ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<2>, BinaryOpListAlphaFunctor<float, 2, 2, 0>>",)),
    # TensorFlow's softmax kernel is GenerateNormalizedProb (exp(x - max) / sum, the max and sum reduced before it).
    ("softmax", "softmax", r"soft ?max|\bgenerate normalized prob",
     ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, Epilogue>(float*, float const*, int)",
      "void tensorflow::(anonymous namespace)::GenerateNormalizedProb<float, float, 4>(float const*, float const*, float const*, float*, int, int, int)",
      "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, int, int, int, bool const*, int, bool)",
      "triton_per_fused__softmax_2")),
    # Apex and TransformerEngine name their LayerNorm kernels ln_fwd/ln_bwd in namespace layer_norm;
    # Inductor spells a decomposed RMSNorm mean_mul_pow_rsqrt and a LayerNorm var_mean_..._rsqrt.
    ("normalization", "norm",
     r"layer ?norm|rms ?norm|batch ?norm|group ?norm|instance ?norm|\bbn (fw|bw|forward|backward)|welford|rowwise moments|\bln (fwd|bwd|parallel)|gamma beta|\bcu apply (layer|rms)|\bcu compute (part )?grad|\bnorm (fwd|bwd)|\bl 2 (norm|rows)|\bnormalization|\bnorm gated|\bgated norm|\bpow\b.*\brsqrt|\bvar mean\b.*\brsqrt|\bqk norm|^rms ?q?\b|^normalize kernel\b",
     ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)",
      "void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 7168u, 1u, 1u, 4u, 16u> >(layer_norm::FwdParams)",
      "void cuApplyLayerNorm<c10::BFloat16, float, c10::BFloat16>(c10::BFloat16*, float*, float*, c10::BFloat16 const*, int, int, float, c10::BFloat16 const*, c10::BFloat16 const*)",  # Apex
      "void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 4096u, 1u, 1u, 4u, 16u> >(transformer_engine::normalization::FwdParams)",
      "void flashinfer::norm::RMSNormKernel<(unsigned int)8, __half>(T2 *, T2 *, T2 *, unsigned int, unsigned int, unsigned int, float, float)",
      "MIOpenBatchNormFwdTrainSpatial",
      "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
      # darknet's batch norm: normalize_kernel is its (x - mean) / sqrt(var) step
      "normalize_kernel(int, float*, float*, float*, int, int, int)")),
    # Compiler-generated kernels are named by their scheduler: Inductor triton_poi/red/per/tem,
    # nvFuser nvfuser_<scheduler>. They come after attention/softmax/norm (a triton_per_..._softmax
    # is a softmax) and before convolution: triton_poi_fused_convolution_0 is the bias epilogue,
    # a pointwise kernel. nvfuser_none is a fusion compiled without an automatic scheduler (hand
    # scheduled); its work is unknown, so it goes with the common case, pointwise.
    ("elementwise", "generated_pointwise", r"^triton poi|^nvfuser (pointwise|none|no op)\b",
     ("triton_poi_fused_add_mul_0", "triton_poi_fused_convolution_0", "nvfuser_pointwise_f0_c1_r0_g0", "nvfuser_none_f0_c0_r0_g0")),
    ("reduction", "generated_reduction",
     r"^triton (red|per)\b|^nvfuser (reduction|inner persistent|outer persistent|inner outer persistent|cross entropy)\b",
     ("triton_red_fused_sum_1", "triton_per_fused_sum_0",
      "<unnamed>::nvfuser_inner_persistent_f0_c1_r0_g2(<unnamed>::Tensor<float, (int)3, (int)3>, <unnamed>::Tensor<float, (int)2, (int)2>)",
      "nvfuser_reduction_f0_c1_r0_g3")),
    ("gemm", "generated_template", r"^triton tem\b|^nvfuser matmul\b", ("triton_tem_fused_mm_0", "nvfuser_matmul_f0_c1_r0_g0")),
    ("memory", "generated_layout", r"^nvfuser (transpose|resize)\b", ("nvfuser_transpose_f0_c1_r0_g0",)),
    # cuDNN v8/v9 and MIOpen convolution engines; "convert" is no convolution.
    ("gemm", "convolution",
     r"\bconv(?!ert)|winograd|dgrad|wgrad|fprop|implicit (gemm|convolve)|\bigemm|cask( \d+ x)? (cudnn|trt)|scudnn|\b[hsi] \d+ cudnn\b|\bprecompute indices\b|\bim 2 col gemm|\bfft \d d (r 2 c|c 2 r)\b",
     ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int)",
      "sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel_cudnn",
      "cudnn_infer_volta_scudnn_128x128_relu_medium_nn_v1",
      "trt_ampere_h16816cudnn_64x64_sliced1x2_ldg8_relu_exp_stages_64x5_small_nhwc_linkable_tn_v1",  # TensorRT, fp16 conv
      # cuDNN's tensor-core engines: s884cudnn/s1688cudnn (fp32 accumulate) as well as h/i; relu is the fused epilogue
      "volta_s884cudnn_fp16_128x128_ldg8_relu_exp_interior_nhwc_tn_v1",
      "turing_fp16_s1688cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1",
      # precomputes the gather indices of an implicit-GEMM convolution, like cask's computeOffsetsKernel
      "void cudnn::cnn::kern_precompute_indices<false>(int*, int, int, int, int, int, int)",
      "void cask_trt::computeOffsetsKernel<(bool)0, (bool)0>(cask_trt::ComputeOffsetsParams)",  # TensorRT conv's index precompute
      "void cask__5x_cudnn::computeOffsetsKernel<(bool)0, (bool)0>(cask__5x_cudnn::ComputeOffsetsParams)",  # cuDNN 9's copy
      "naive_conv_fwd_nchw_float_double_float",
      "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt256x128x32_wt32x32x8_ws2x1_wr2x2_ta1x8x4x1_1x4x1x64_tb1x8x2x1_1x4x1x64",
      # cuDNN's FFT convolution algorithm: forward/inverse transforms around a pointwise product (P100 nvprof)
      "void fft2d_r2c_32x32<__half, bool=0, unsigned int=1, bool=1>(float2*, __half const *, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)")),
    # Pooling before the vendor GEMM row: TensorRT names its pooling kernels sm50_xmma_pooling_*.
    ("reduction", "pooling", r"\bpool|\b(max|avg)pool",
     ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, float*, long*)",
      "sm50_xmma_pooling_coalescedC_NHWC_kMAX_2_False_execute_kernel_trt",
      "forward_maxpool_layer_kernel(int, int, int, int, int, int, int, float*, float*, int*)")),  # darknet  # TensorRT: xmma says GEMM, pooling says what it does
    # Vendor GEMM libraries: cuBLAS (sm80/sm90 xmma, nvjet, ampere_*gemm, gemv2T), cuBLASLt (bmm_* on
    # sm100, splitKreduce), CUTLASS 2/3 (cutlass_80_tensorop_*, cutlass3x_*, device_kernel<GemmKernel>),
    # AMD Tensile/hipBLASLt (Cijk_*: its tuning token ONLL1 is no "nll"), rocBLAS, Composable Kernel
    # (kernel_gemm_xdl_*), aiter asm GEMMs, FlyDSL's mfma_* kernels (MFMA is AMD's matrix-core FMA, as
    # wgmma/hgmma are NVIDIA's), llama.cpp mul_mat. "fbgemm" is FBGEMM, not a GEMM.
    ("gemm", "dense",
     r"(?<!fb)gemm|gemv|xmma|nvjet|\bwgmma|hgmma|\bmfma\b|cublas|matmul|\bb?mm\b|\bcijk\b|cutlass|\bsplit ?k ?reduce|\breduce split ?k|\bdot product|\bmul mat\b|\bmatrix mul",
     ("ampere_sgemm_128x64_tn",
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
      "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN",
      "bmm_E4m3E4m3_Fp32_t128x128x128u2_s6_et64x32_m128x128x32_cga1x1x1_16dp256b_TN_schedS",
      "bmm_Bfloat16_Bfloat16_Fp32_t128x128x64u2_s6_et64x32_m128x128x16_cga1x1x1_16dp256b_TN_schedS",
      "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
      "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_nt_align8>(T1::Params)",
      "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_2x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma",
      "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel::Params)",
      "Cijk_Alik_Bljk_HSS_BH_Bias_HA_S_SAV_UserArgs_MT16x128x32_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB1_EPS1_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA1201_IU1_K1_LDSTI0_LBSPPA128_LBSPPB0_LBSPPM0_LPA16_LPB0_LPM0_LRVW8_LWPMn1_MIAV1_MIWT1_8_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS0_NLCA1_NLCB2_ONLL1_PGR1_PLR1_PKA0_SIA3_SS0_SPO0_SRVW0_SSO0_SVW8_SK0_SKFTR0_SKXCCM0_TLDS2_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_VWB1_WSGRA0_WSGRB0_WS32_WG16_2_1.kd",
      "void rocblas_gemvt_kernel<true, 256, float, float, float>(int, int, float, long, float const*, long, long, float const*, long, long, float, long, float*, long, long)",
      "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor, ck::tensor_layout::gemm::ColumnMajor, ck::tensor_layout::gemm::RowMajor, ck::bhalf_t, ck::bhalf_t, float, ck::bhalf_t>, true, (ck::InMemoryDataOperationEnum)0, 2, (ck::TailNumber)1>(ck::Argument)",
      "_ZN5aiter24bf16gemm_bf16_tn_256x256E",
      "mfma_moe1_bs_fp8_f16_cshuffle_t16x256x128_wpe2_abi8",  # FlyDSL MoE stage 1 on MI355
      "void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, (bool)0>(cublasLt::cublasSplitKParams<float>)")),
    # Position encodings, activations and generators compute every element from a formula: pointwise,
    # even when the name also says embedding (vLLM's rotary_embedding_kernel), index (ATen's arange
    # launcher) or transpose (DeepSeek's swiglu_and_per_channel_cast_and_transpose).
    ("elementwise", "named_pointwise",
     r"rotary|\brope\b|\bphilox random|\bthree ?fry\b|\bwith index\b|\barange|\blinspace|exponential|swiglu|\bsilu|\bgelu|\bgeglu|\bact and mul",
     ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int)",
      "void cuda::swiglu_and_per_channel_cast_and_transpose<256, 128, false>(void const*, unsigned char*, float*, int, int, float, __nv_fp8_interpretation_t)",
      # JAX's counter-based random number generator (jax.random), one output word per thread
      "jax::<unnamed>::ThreeFry2x32Kernel(const unsigned int *, const unsigned int *, const unsigned int *, const unsigned int *, unsigned int *, unsigned int *, long)")),
    # Sorts, scans and selections; rocPRIM/CUB partition (stream compaction, behind nonzero/unique) too.
    ("reduction", "topk_sort",
     r"\btop ?k|\bsort|\bradix|\bscan\b|\barg ?(max|min)|\bcum ?(sum|prod)|\bunique|\bhistogram|\bselect (k|top)|onesweep|\bpartition|\btop ?p\b|\btopp\b|\bcu seq lens",
     ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>)",
      # top-p sampling (FasterTransformer) sorts and selects; cu_seqlens is a prefix sum of the sequence lengths
      "fastertransformer::topPInitialize(int*, int*, int*, int, int)",
      "fastertransformer::getCuSeqLensKernel(int*, int const*, int const*, int)")),
    # Copies, fills, gathers and layout changes. ATen's pointwise launchers are named by their functor
    # (subject 1), so a copy or FillFunctor launch lands here and an AddFunctor launch does not. "fill"
    # counts only as the first word: masked_fill reads a mask and an input, it is pointwise.
    ("memory", "copy_layout",
     r"\bcopy|memcpy|memset|\bcat array|\bconcat|\bindex|\bindices\b|gather|scatter|transpose|\bpermute|^fill\b|\bfill buffer|\bcpy\b|\bpad\b|im 2 col|col 2 im|\b(nchw|nhwc) (to|2)\b|\bto (nchw|nhwc)\b|\bswap dimension|\bset to value\b|\bstitch\b|contiguous|unfold|\broll\b|\bflip\b|\brepeat|\btake\b|\bset tensor|\bstrided|\blayout|\bshuffle|\bbroadcast copy|\breshape|\bsplit (kernel|cat)|\bsplit ?3\b|\bcopy rows|\bget rows|\bset rows|\bslice|\bpack\b|\bunpack\b|^cupy fill\b|\bghost extractor|\blookup\b",
     ("void at::native::elementwise_kernel<128, 2, gpu_kernel_impl_nocast<direct_copy_kernel_cuda(TensorIteratorBase&)>>(int)",
      "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1>>(int)",
      "__amd_rocclr_fillBufferAligned.kd",
      "void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<unsigned int, int=256, int=32, int=32, bool=0>(unsigned int const *, tensorflow::functor::Dimension<int=3>, tensorflow::functor::SwapDimension1And2InTensor3UsingTiles<unsigned int, int=256, int=32, int=32, bool=0>*)",  # TF's transpose
      "void at::native::(anonymous namespace)::write_indices<long>(long*, at::native::(anonymous namespace)::TensorDims<long>, int, long, long*, long)",
      "cupy_fill",
      "void fastertransformer::lookupHiddenStateOfLastToken<__half>(__half*, __half const*, int const*, int, int, int)",  # a gather  # CuPy's fill kernel (its ufuncs are pointwise, below)
      # QUDA launches every kernel through Kernel1D/2D/3D<Functor, Arg>: the functor names it, mangled (S_ is
      # quda:: named again) or not; GhostExtractor packs a lattice's halo faces into a send buffer
      "_ZN4quda8Kernel3DINS_10CopyGauge_ENS_12CopyGaugeArgIddLi18ELb0ENS_5gauge11FloatNOrderIdLi18ELi2ELi12EL20QudaStaggeredPhase_s0ELb1EL19QudaGhostExchange_sn2147483648ELb0EEENS3_8QDPOrderIdLi18EEEEELb0EEENSt9enable_ifIXclsr6deviceE14use_kernel_argIT0_EEEvE4typeESC_",
      "std::enable_if<device::use_kernel_arg<T2>(), void>::type quda::Kernel3D<quda::GhostExtractor, quda::ExtractGhostArg<double, (int)3, quda::gauge::FloatNOrder<double, (int)18, (int)2, (int)12, (QudaStaggeredPhase_s)0, (bool)1, (QudaGhostExchange_s)-2147483648, (bool)0>, (bool)1>, (bool)0>(T2)")),
    ("reduction", "reduce",
     r"reduc|\bdot\b|\bunsorted segment|\bcleanup segments|\bsegment (sum|reduc)|\bbias grad|\bcub\b|\bnorm kernel|\bnll\b|criterion|cross entropy|\bloss|\b(sum|mean|amax|max|min|prod|std|var)\b.*\b(kernel|op|ops|functor)\b|\bsum\b|\bamax|\bdevice (reduce|segmented)|\bsample|\bsampling|\bbatch norm collect",
     ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>>(T3)",
      "void dot_kernel<double>(double const *, double const *, double*, unsigned int)",  # BabelStream's dot product
      "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
      # TF's segment sum finishes the segments a block straddled; its namespace says "functor", its name says sum
      "void tensorflow::functor::CleanupSegments<float*, float*, cub::Sum>(float*, float*, int, int, int, cub::Sum, std::integral_constant<bool, false>)")),
    # Anything under ATen's pointwise launchers lands here once its functor said nothing more
    # specific; MIOpen's tensor ops (Op2dTensorGeneric, SubTensorOpWithScalar1d) are pointwise too.
    # Arithmetic spelled out (subtract_kernel, array_divide) is pointwise; "matrix multiply" was
    # taken by the GEMM row above. So are triu/tril (a masked copy) and device-wide transforms
    # (rocPRIM's transform, under its trampoline_kernel launcher).
    ("elementwise", "pointwise",
     r"element ?wise|\belem ?wise|pointwise|functor|\baccum\b|\bsquare\b|\btriad\b|\bscal\b|\beigen meta kernel\b|activat(e|ion)|relu|sigmoid|tanh|dropout|threshold|clamp|\bwhere\b|scale|scaling|bias|\badd|\bmul\b|\bmultiply\b|\bdiv(ide)?\b|\bsub(tract)?\b|\bexp\b|\bpow\b|sqrt|\bneg\b|\babs\b|\blog\b|\bsin\b|\bcos\b|\b(auto)?cast|quant|\bupsample|\binterpolat|\bconvert|\bunary|\bbinary|\bternary|bcast|\bop \d d tensor|\btensor op|\bop tensor|\bsub tensor|\bscale tensor|\brandom|\buniform|\bnormal\b|distribution|philox|\b(cu|roc)rand\b|\bgenerate seed|\bgen sequenced|^cupy\b|bernoulli|\blerp|\baxpy|\bfma\b|\bsoftplus|\bsign\b|\bround|\bmasked|\bfused (add|mul|bias)|\bpenalty|\bvectorized|\btri[ul]\b|\btransform\b|\bshift (left|right)\b",
     ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, MulFunctor<float>>, std::array<char*, 3>>(int)",
      "SubTensorOpWithScalar1d",
      "Op2dTensorGeneric",
      "subtract_kernel(float*, float const*, float const*, int, int)",  # rocprofv3 sample app
      "void triad_kernel<double>(double*, double const *, double const *)",  # BabelStream
      "square_kernel_0d1d234",  # a Triton kernel (GPU MODE lecture 1, ncu)
      "void scal_kernel<float, float, int=1, bool=1, int=6, int=5, int=5, int=3>(cublasTransposeParams<float>, float const *, float*, float const *)",  # cuBLAS scal
      # Eigen's meta kernel (TensorFlow) evaluates the tensor expression in its template arguments, one
      # coefficient per thread; the rules do not read template arguments, so it counts as pointwise even
      # when that expression is a plain copy or broadcast.
      "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::TensorAssignOp<Eigen::TensorMap<Eigen::Tensor<float, int=1, int=1, int>, int=16, Eigen::MakePointer>, Eigen::TensorCwiseUnaryOp<Eigen::internal::scalar_tanh_op<float>, Eigen::TensorMap<Eigen::Tensor<float const , int=1, int=1, int>, int=16, Eigen::MakePointer> const > const > const , Eigen::GpuDevice>, int>(float, int=1)",
      # cuDNN's RNN gate math, camelCase (elemWise/elementWise) and a bidirectional sum (P100 nvprof)
      "void elemWiseRNNcell<__half, __half, float, cudnnRNNMode_t=2, cudnnRNNBiasMode_t=2>(int, int, int, int, int, bool, __half const *, __half const *, __half const *, __half const *, __half const *, __half const *, __half const *, __half*, __half*, __half*, __half*, __half*, cudnnRNNClipMode_t, cudnnNanPropagation_t, float, float)",
      "void RNN_bidirectional_accum_bp1_1<__half, __half, float>(__half*, __half*, __half*, int)",
      "void at::native::triu_tril_kernel<bool, int, false, 8, false>(at::cuda::detail::TensorInfo<bool, int>, at::cuda::detail::TensorInfo<bool const, int>, long, long, int)",
      "void rocprim::ROCPRIM_400200_NS::detail::trampoline_kernel<rocprim::ROCPRIM_400200_NS::detail::wrapped_transform_config<rocprim::ROCPRIM_400200_NS::default_config, unsigned long, true>, (rocprim::ROCPRIM_400200_NS::detail::target_arch)950, rocprim::ROCPRIM_400200_NS::detail::transform_impl<true, rocprim::ROCPRIM_400200_NS::default_config, unsigned long*, int*, rocprim::ROCPRIM_400200_NS::identity<void> >(unsigned long*, int*, unsigned long, rocprim::ROCPRIM_400200_NS::identity<void>, ihipStream_t*, bool)::{lambda(auto:1)#1}, rocprim::ROCPRIM_400200_NS::detail::default_config_selector>(rocprim::ROCPRIM_400200_NS::detail::transform_impl<true, rocprim::ROCPRIM_400200_NS::default_config, unsigned long*, int*, rocprim::ROCPRIM_400200_NS::identity<void> >(unsigned long*, int*, unsigned long, rocprim::ROCPRIM_400200_NS::identity<void>, ihipStream_t*, bool)::{lambda(auto:1)#1})",
      "void cuda::per_token_cast_back_special_fmt_impl<3>(void const*, void*, float const*, long, long)",
      # TorchScript's fuser names a fused dtype cast fused__autocast_to__<hash>
      "fused__autocast_to__12152488584593855096",
      # random number generators: cuRAND's (no namespace) and rocRAND's (its namespace speaks)
      "void gen_sequenced<curandStateXORWOW, double2, normal_args_double_st, &curand_normal_scaled2_double<curandStateXORWOW>, rng_config<curandStateXORWOW, (curandOrdering)101>>(T1 *, T2 *, unsigned long, unsigned long, T3)",
      "rocrand_host::detail::init_engines_kernel(rocrand_device::xorwow_engine*, unsigned int, unsigned long long, unsigned long long)",
      "cupy_absolute__complex128_float64",
      "void fastertransformer::batchApplyTemperaturePenalty<float>(float*, float const*, float const*, int, int, int)",  # scales logits  # CuPy names an elementwise ufunc kernel cupy_<ufunc>__<dtypes>
      # Upsampling interpolates each output from a few neighbouring inputs (a weighted sum, like lerp): pointwise
      "void at::native::(anonymous namespace)::upsample_linear1d_out_frame<float, float>(int, T2, bool, at::GenericPackedTensorAccessor<const T1, (unsigned long)3, at::DefaultPtrTraits, long>, at::GenericPackedTensorAccessor<T1, (unsigned long)3, at::DefaultPtrTraits, long>)",
      # XLA names an unfused kernel by its HLO op and a counter (JAX on GPU, nsys): a bit shift of each element.
      # Its fusions are plain "fusion_N" and say nothing of their contents: those stay "other".
      "shift_right_logical_3")),
)  # fmt: skip

OTHER = ("other", "other")
# Display order (reports list categories in it); every rule's category is one of these.
CATEGORIES = (
    "cuda graph",
    "communication",
    "attention",
    "optimizer",
    "softmax",
    "normalization",
    "gemm",
    "memory",
    "reduction",
    "elementwise",
    OTHER[0],
)
_COMPILED = tuple(re.compile(pat) for _, _, pat, _ in KERNEL_RULES)

# Launchers whose identity is their first type argument (the kernel class or functor they run).
_WRAPPERS = frozenset(
    {
        "device_kernel",  # CUTLASS 3: cutlass::device_kernel<GemmKernel / flash::FlashAttnFwdSm90 ...>
        "Kernel",  # CUTLASS 2: cutlass::Kernel<cutlass::gemm::kernel::Gemm...>
        "Kernel2",  # CUTLASS 2.x library: cutlass::Kernel2<cutlass_80_tensorop_..._align8>
        "kentry",  # Composable Kernel tile: ck_tile::kentry<1, ck_tile::FmhaFwdKernel<...>>
        "elementwise_kernel",  # ATen's pointwise launchers: the functor tells copy/fill from math
        "vectorized_elementwise_kernel",
        "unrolled_elementwise_kernel",
        "elementwise_kernel_manual_unroll",
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "trampoline_kernel",  # rocPRIM device algorithms: trampoline_kernel<wrapped_reduce_config<...>, ...>
        "Kernel1D",  # QUDA (lattice QCD): quda::Kernel3D<quda::CopyGauge_, ...> is named by its functor
        "Kernel2D",
        "Kernel3D",
    }
)
_SCALAR_TYPES = frozenset(
    "void bool char short int long unsigned signed float double half bfloat16 float16 __half __nv_bfloat16 "
    "BFloat16 Half c10 true false const".split()
)
_SUBSTITUTION = re.compile(r"S[0-9A-Z]*_")
_CLONE = re.compile(r"\s*\[clone [^\]]*\]\s*$|\.kd$")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")
_NON_WORD = re.compile(r"[^A-Za-z0-9]+")
_ENABLE_IF = re.compile(r"^std::enable_if<.*?>::type\s+")  # SFINAE return type (vLLM's fused_add_rms_norm_kernel)


def _words(text: str) -> str:
    """Lowercase words of an identifier: split at punctuation, camelCase and letter/digit changes."""
    return " ".join(_NON_WORD.sub(" ", _CAMEL.sub(" ", text)).lower().split())


def _split_args(inner: str) -> list[str]:
    """Top-level comma-separated template arguments of ``inner`` (the text between ``<`` and ``>``)."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]" and depth:
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
    args.append(inner[start:].strip())
    return [a for a in args if a]


def _parse_demangled(name: str) -> tuple[list[str], str, list[str]]:
    """(namespaces, function name, template arguments) of a demangled signature or plain name."""
    s = name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    s = _ENABLE_IF.sub("", s)  # its condition has a bare ">" that would unbalance the brackets
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # the parameter list starts at the first "(" outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0 and i:
            cut = i
            break
    s = s[:cut]
    outer, last_args, depth, start = [], "", 0, 0
    for i, ch in enumerate(s):  # text outside template brackets; keep the last bracket's contents
        if ch == "<":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                last_args = s[start:i]
        elif depth == 0:
            outer.append(ch)
    qualified = "".join(outer).split()
    parts = (qualified[-1] if qualified else "").split("::")  # drops the return type
    return [p for p in parts[:-1] if p], parts[-1], _split_args(last_args) if last_args else []


def _source_names(s: str, i: int, nested: bool) -> tuple[list[str], int]:
    """Length-prefixed identifiers of an Itanium-mangled (nested) name from position ``i``."""
    parts = []
    while i < len(s):
        if s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            parts.append(s[j : j + n])
            i = j + n
            if not nested:
                break
        elif s[i] in "KVrL" or s.startswith("St", i):
            i += 2 if s.startswith("St", i) else 1
        elif m := _SUBSTITUTION.match(s, i):  # S_, S0_: a prefix named earlier (QUDA's quda:: in its arguments)
            i = m.end()
        else:
            break
    return parts, i


def _parse_mangled(name: str) -> tuple[list[str], str, list[str]]:
    """(namespaces, function name, first template argument) read from an ``_Z`` mangled name."""
    nested = name.startswith("_ZN")
    parts, i = _source_names(name, 3 if nested else 2, nested)
    if not parts:
        return [], name, []
    args = []
    if name.startswith("I", i):  # first template argument, when it is a (nested) type name
        j = i + 1
        arg, _ = _source_names(name, j + 1, True) if name.startswith("N", j) else _source_names(name, j, False)
        if arg:
            args = ["::".join(arg)]
    return parts[:-1], parts[-1], args


def _subjects(name: str, depth: int = 0) -> list[str]:
    """Word strings to match, in order: a launcher's kernel/functor, the own name, namespaces + own name."""
    s = _CLONE.sub("", name.strip())
    namespaces, fn, args = _parse_mangled(s) if s.startswith("_Z") else _parse_demangled(s)
    if s.startswith("[") or not fn:  # "[CUDA graph 3]" and other bracketed pseudo-names
        return [_words(s)]
    out = []
    if fn in _WRAPPERS and depth < 4:
        for arg in args:
            _, arg_fn, _ = _parse_demangled(arg)
            if arg_fn and arg_fn not in _SCALAR_TYPES and not arg_fn[0].isdigit() and not arg.startswith("("):
                out += _subjects(arg, depth + 1)
                break
    own = _words(fn)
    out.append(own)
    if namespaces:
        out.append(f"{_words(' '.join(namespaces))} {own}")
    return out


def rule_index(name: str) -> int:
    """Index in KERNEL_RULES of the rule that decides ``name`` (-1: none, "other")."""
    for subject in _subjects(name):
        for i, rx in enumerate(_COMPILED):
            if rx.search(subject):
                return i
    return -1


def classify_name(name: str) -> tuple[str, str]:
    """Category and subcategory of one kernel name ("other" when no rule matches)."""
    i = rule_index(name)
    return OTHER if i < 0 else KERNEL_RULES[i][:2]


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
