import torch

from workloads.attention import attention_triton, make_inputs

q, k, v = make_inputs(2, 4, 1000, 64, torch.bfloat16, "cuda")
f = torch.compile(attention_triton, fullgraph=True)
o1 = f(q, k, v, True)
o1.sum().backward()
g1 = [t.grad.clone() for t in (q, k, v)]
for t in (q, k, v):
    t.grad = None
o2 = attention_triton(q, k, v, True)
o2.sum().backward()
g2 = [t.grad for t in (q, k, v)]
print(
    "compile smoke max|diff| o",
    (o1 - o2).abs().max().item(),
    "grads",
    [(a - b).abs().max().item() for a, b in zip(g1, g2, strict=True)],
)
