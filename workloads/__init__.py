"""NVTX-annotated PyTorch workloads (torch only; no analysis code here)."""
