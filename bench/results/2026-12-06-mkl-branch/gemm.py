import torch, time
torch.set_num_threads(1)
for (m,k,n) in [(8,32,32),(64,256,256),(256,1024,1024),(128,3136,512)]:
    a=torch.randn(m,k); b=torch.randn(k,n)
    for _ in range(3): torch.mm(a,b)
    reps=max(3,int(2e8/(m*k*n)))
    t=time.perf_counter()
    for _ in range(reps): torch.mm(a,b)
    dt=(time.perf_counter()-t)/reps
    print(f"{m}x{k}x{n}: {2*m*k*n/dt/1e9:.1f} GFLOP/s")
