"""Timing helpers shared by the kernel measurement scripts of this folder (torch only)."""


def timed(torch, fn, reps, warmup=3):
    """Median seconds of fn() over reps runs between CUDA events, after warmup runs; and all of them."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    times.sort()
    return times[len(times) // 2], times


def kernels_of(torch, fn, reps):
    """Every CUDA kernel fn() launches, under torch.profiler: [name, launches, seconds] per call of
    fn, averaged over reps calls, longest first."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            d = kernels.setdefault(ev.name, [0, 0.0])
            d[0] += 1
            d[1] += (ev.device_time if hasattr(ev, 'device_time') else ev.cuda_time) * 1e-6
    return sorted(([k, c / reps, t / reps] for k, (c, t) in kernels.items()), key=lambda r: -r[2])
