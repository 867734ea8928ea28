"""Arrays in and out: NumPy always; torch tensors through DLPack when the caller used torch."""
import numpy as np


def is_torch(value):
    return type(value).__module__.startswith("torch")


def to_numpy(value):
    """Token ids or a mask as a NumPy array: from a list, an array, or a torch tensor."""
    if value is None:
        return None
    if is_torch(value):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def like(result, template):
    """`result` (a NumPy array) as a torch tensor through DLPack, without a copy, where `template`
    (what the caller passed) is one; else as it is."""
    if template is not None and is_torch(template):
        import torch

        return torch.from_dlpack(result)
    return result


def as_tensors(rows, return_tensors):
    """Equal-length rows of ints as `return_tensors` asks: "np", "pt", or None (lists)."""
    if return_tensors is None:
        return rows
    if return_tensors not in ("np", "pt"):
        raise ValueError(f"return_tensors={return_tensors!r} is not supported: use 'np' or 'pt'")
    if len({len(r) for r in rows}) > 1:
        raise ValueError(
            "Unable to create tensor, you should probably activate truncation and/or padding with "
            "'padding=True' 'truncation=True' to have batched tensors with the same length.")
    array = np.asarray(rows, dtype=np.int64)
    if return_tensors == "pt":
        import torch

        return torch.from_dlpack(array)
    return array
