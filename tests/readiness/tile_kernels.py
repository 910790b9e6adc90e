"""TileLang kernels written for GPUs, the fixtures of tests/readiness/test_tile_programs.py: an elementwise add
(T.Parallel over threads), a row norm (register fragments, a reduction, T.rsqrt) and a GEMM (T.gemm into a
fragment). Each is a builder returning a prim_func, as ``tileport lower --impl FILE:NAME --arg M=...`` takes;
``gemm`` is a module-level prim_func (``--impl FILE:gemm``, no arguments)."""

import tilelang
import tilelang.language as T


def elementwise(M=1024, N=1024, block_M=128, block_N=128, dtype="float16"):
    @T.prim_func
    def add(
        A: T.Tensor((M, N), dtype),
        B: T.Tensor((M, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (
            bx,
            by,
        ):
            for i, j in T.Parallel(block_M, block_N):
                C[by * block_M + i, bx * block_N + j] = (
                    A[by * block_M + i, bx * block_N + j] + B[by * block_M + i, bx * block_N + j]
                )

    return add


def rownorm(M=1024, N=1024, block_M=4, dtype="float16"):
    @T.prim_func
    def norm(A: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            a_s = T.alloc_shared((block_M, N), dtype)
            a_f = T.alloc_fragment((block_M, N), "float32")
            s = T.alloc_fragment((block_M,), "float32")
            T.copy(A[bx * block_M, 0], a_s)
            T.copy(a_s, a_f)
            for i, j in T.Parallel(block_M, N):
                a_f[i, j] = a_f[i, j] * a_f[i, j]
            T.reduce_sum(a_f, s, dim=1)
            for i, j in T.Parallel(block_M, N):
                a_f[i, j] = a_s[i, j] * T.rsqrt(s[i] + 1e-6)
            T.copy(a_f, C[bx * block_M, 0])

    return norm


def matmul(M=1024, N=1024, K=1024, bm=128, bn=128, bk=32, dtype="float16"):
    @T.prim_func
    def mm(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return mm


gemm = matmul(M=256, N=256, K=256)  # a T.prim_func at module level, as a user's kernel file holds one


def ascend_scale(M=1024, N=1024, block_M=8, cores=32, dtype="float16"):
    """The elementwise kernel as the Ascend dialect writes it: a grid of vector cores walking row blocks, copies
    in the storage dtype, the arithmetic in a SIMT VF block."""
    import tilelang.ascend.language as TA

    @TA.prim_func
    def scale(A: TA.Tensor((M, N), dtype), C: TA.Tensor((M, N), dtype)):
        with TA.Kernel(cores) as core:
            a = TA.alloc_shared((block_M, N), dtype)
            c = TA.alloc_shared((block_M, N), dtype)
            for t in TA.serial(TA.ceildiv(TA.ceildiv(M, block_M), cores)):
                b = core + t * cores
                if b < TA.ceildiv(M, block_M):
                    TA.copy(A[b * block_M : b * block_M + block_M, 0:N], a)
                    with TA.SimtVF(threads=128):
                        for i, j in TA.Parallel(block_M, N):
                            c[i, j] = a[i, j] * TA.cast(2.0, dtype)
                    TA.copy(c, C[b * block_M : b * block_M + block_M, 0:N])

    return scale


@tilelang.jit(out_idx=[-1])
def silu_mul(M, N, block_M=32, dtype="float32"):
    """SwiGLU as a GPU kernel writes it (a block of rows per program, T.Parallel over its elements, fp32 math):
    built for the C target with symbolic M and N, it is what ``tileport verify swiglu --impl`` runs."""

    @T.prim_func
    def main(G: T.Tensor((M, N), dtype), U: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, N):
                if bx * block_M + i < M:
                    g = T.cast(G[bx * block_M + i, j], "float32")
                    u = T.cast(U[bx * block_M + i, j], "float32")
                    Y[bx * block_M + i, j] = T.cast(g / (1.0 + T.exp(-g)) * u, dtype)

    return main


@tilelang.jit(out_idx=[1])
def l2norm_rows(M, N, dtype="float32", accum_dtype="float64"):
    """l2norm with one program per row, explicit loops and eps a scalar parameter: it builds for the C target,
    where the fragment-and-reduce form (``rownorm``) does not. The row's sum in ``accum_dtype``: fp64 passes the
    standard's fp32 limits, a one-pass fp32 sum (``--arg accum_dtype=float32``) does not on long rows."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype), eps: T.float32):
        with T.Kernel(M, threads=1) as row:
            acc = T.alloc_local((1,), accum_dtype)
            acc[0] = 0.0
            for j in T.serial(N):
                acc[0] += T.cast(X[row, j], accum_dtype) * T.cast(X[row, j], accum_dtype)
            for j in T.serial(N):
                Y[row, j] = T.cast(T.cast(X[row, j], accum_dtype) / T.sqrt(acc[0] + T.cast(eps, accum_dtype)), dtype)

    return main
