# Sourced by the device scripts (from the repository root): the GPU machine's environment. NVLink multicast off
# (NCCL NVLS, symmetric memory, NVSHMEM), the Triton interpreter off, no hub access, and the carried wheels
# (.whl/: hydra-core and its joblib launcher, omegaconf, simpy, gguf, deepspeed and its needs) installed into /tmp/site when missing.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export TRITON_INTERPRET=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if ! python3 -c "import hydra, omegaconf, gguf, simpy, deepspeed, joblib, hydra_plugins.hydra_joblib_launcher" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
