/* CUDA backend (in progress). */
int cuda_backend_placeholder;
