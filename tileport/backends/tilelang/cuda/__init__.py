"""TileLang CUDA kernels (tile style: fragments, T.reduce_sum, threads), lowered and compiled without a GPU
here and run where one is present."""
