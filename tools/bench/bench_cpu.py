"""The CPU a Python benchmark ran on, for its header: the model name and the widest x86 vector
ISA, from /proc/cpuinfo ("unknown CPU" and "no AVX2" where it says nothing)."""
import platform


def cpu_info():
    """(model, isa), e.g. ("AMD EPYC", "AVX-512 (avx512_bf16)")."""
    model = platform.processor() or "unknown CPU"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("unknown CPU", "x86_64", ""):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    isa = ("AVX-512" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
           else "AVX2" if "avx2" in flags else "no AVX2")
    extras = [f for f in ("avx512_bf16", "amx_bf16", "avx512_fp16") if f in flags]
    return model, isa + (" (" + ", ".join(extras) + ")" if extras else "")
