"""Three ordinary Triton kernels used by the demo and the end-to-end tests: nothing in them is
specific to the apple backend."""
import triton
import triton.language as tl


@triton.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    # Each program handles rows pid, pid + num_programs, ... (a persistent loop over rows).
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row in range(row_start, n_rows, row_step):
        cols = tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


@triton.jit
def layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride
    y_ptr += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        d = tl.where(cols < N, x - mean, 0.0)
        acc += d * d
    var = tl.sum(acc, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_ptr + cols, y, mask=mask)


def vector_add(x, y):
    out = x.new_empty(x.shape)
    n = out.numel()
    vector_add_kernel[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK_SIZE=1024)
    return out


def softmax(x, num_programs: int = 8):
    n_rows, n_cols = x.shape
    out = x.new_empty(x.shape)
    block = triton.next_power_of_2(n_cols)
    num_warps = 4 if block <= 2048 else 8
    softmax_kernel[(min(num_programs, n_rows), )](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                  BLOCK_SIZE=block, num_warps=num_warps)
    return out


def layer_norm(x, weight, bias, eps: float = 1e-5):
    m, n = x.shape
    y = x.new_empty(x.shape)
    mean = x.new_empty((m, ), dtype=x.dtype)
    rstd = x.new_empty((m, ), dtype=x.dtype)
    block = min(1024, triton.next_power_of_2(n))
    layer_norm_fwd_kernel[(m, )](x, y, weight, bias, mean, rstd, x.stride(0), n, eps, BLOCK_SIZE=block)
    return y, mean, rstd
