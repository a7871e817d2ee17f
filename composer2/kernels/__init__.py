"""MXFP8 and NVFP4 quantisation and grouped GEMMs (Triton), the C decode-attention and MoE kernels, and the
registry `model.expert_backend` picks an expert GEMM from. Not the model that calls them."""
