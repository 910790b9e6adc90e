"""TileLang kernels for the CPU (TileLang's C target, built with g++ -O3 -march=native -fopenmp)."""
