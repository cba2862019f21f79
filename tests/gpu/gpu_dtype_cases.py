"""tests/gpu cases for DLPack types CAI cannot name (issue 35): torch's
bfloat16, float8 and float4 x2 CUDA tensors, and JAX's bfloat16 on the GPU,
go through caibridge.from_dlpack and back zero-copy with their values;
only the CAI read refuses them.  Registered in gpu_cases.CASES when
gpu_cases is imported."""
import caibridge
from gpu_cases import Skip, case

TORCH_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2",
               "float4_e2m1fn_x2"]


@case("cuda:0: torch bfloat16, float8 and float4 x2 through from_dlpack "
      "and back: the same memory and values; the CAI read refused")
def torch_types_round_trip(libs, device):
    torch = libs.torch
    done, notes = [], []
    for name in TORCH_TYPES:
        dtype = getattr(torch, name, None)
        if dtype is None:
            notes.append(f"torch has no {name}")
            continue
        raw = torch.arange(24, dtype=torch.uint8, device="cuda:0")
        t = raw.view(dtype)[: raw.view(dtype).numel() // 2 * 2].reshape(2, -1)
        try:
            t.__dlpack__()
        except Exception as e:  # torch's own export refuses the type
            notes.append(f"torch does not export {name}: {e}")
            continue
        view = caibridge.from_dlpack(t)
        back = torch.from_dlpack(view)
        same = (back.dtype == t.dtype and back.data_ptr() == t.data_ptr()
                and torch.equal(back.view(torch.uint8), t.view(torch.uint8)))
        try:
            view.__cuda_array_interface__
            refused = False
        except BufferError as e:
            refused = "DLPack can still carry" in str(e)
        if not (same and refused):
            return False, f"{name}: same {same}, CAI refused {refused}"
        done.append(name)
    if not done:
        raise Skip("; ".join(notes))
    return True, "carried: " + ", ".join(done)


@case("cuda:0: JAX bfloat16 on the GPU through from_dlpack and back")
def jax_bfloat16_round_trip(libs, device):
    jax = libs.jax
    import jax.numpy as jnp
    x = jnp.arange(8, dtype=jnp.float32).astype(jnp.bfloat16)
    view = caibridge.from_dlpack(x, allow_readonly_legacy=True)
    back = jax.dlpack.from_dlpack(view)
    ok = back.dtype == x.dtype and bool((back == x).all())
    return ok, f"dtype {back.dtype}"
