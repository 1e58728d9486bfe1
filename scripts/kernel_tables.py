#!/usr/bin/env python3
# Writes topologies/kernels/published.csv: the figures as read off the published charts (below, with their
# sources), the rows derived from two published figures, and the stated assumptions where nothing is published.
# Run it after changing a figure; the build compiles the CSV in.
seqs=[512,1024,2048,4096,8192,16384]
FA3F="FlashAttention-3 paper (arXiv 2407.08608) Fig. 5 forward FP16/BF16 H100 SXM5; bar labels (Dao-AILab/flash-attention assets/flash3_fp16_fwd.png)"
FA3B="FlashAttention-3 paper (arXiv 2407.08608) Fig. 6 backward FP16/BF16 H100 SXM5; bar labels"
FA2H="FlashAttention-2 paper (arXiv 2307.08691) Fig. 7 fwd+bwd H100 SXM5 (assets/flash2_h100_fwd_bwd_benchmark.png)"
FA2A="FlashAttention-2 paper (arXiv 2307.08691) Fig. 4 fwd+bwd A100 SXM4 80GB (assets/flash2_a100_fwd_bwd_benchmark.png)"
N=None
fwd={ # (lib, causal, hd): values by seq
('fa3',0,64):[333,392,460,476,496,497],('fa3',1,64):[197,265,371,420,460,473],
('fa3',0,128):[467,565,625,638,646,648],('fa3',1,128):[292,423,521,579,602,616],
('fa3',0,256):[482,N,707,736,746,756],('fa3',1,256):[286,427,537,612,628,642],
('fa2',0,64):[282,306,318,321,322,324],('fa2',1,64):[180,229,262,284,295,299],
('fa2',0,128):[309,350,362,368,370,370],('fa2',1,128):[191,260,298,319,333,335],
('fa2',0,256):[275,313,321,323,324,326],('fa2',1,256):[208,251,278,293,297,298],
('cudnn',0,64):[N,373,395,408,412,413],('cudnn',1,64):[225,288,334,363,379,388],
('cudnn',0,128):[497,574,617,609,600,595],('cudnn',1,128):[315,410,484,518,529,539],
('cudnn',0,256):[470,546,580,581,580,581],('cudnn',1,256):[308,391,450,483,497,509],
}
bwd_full={('fa3',64):[272,363,422,453,472,474],('fa3',128):[316,424,501,542,559,561],
('cudnn',64):[266,348,395,417,432,433],('cudnn',128):[305,408,465,499,518,516],
('fa2',64):[198,238,264,279,287,291],('fa2',128):[214,260,291,310,318,322]}
fa2h_comb={(0,64):[215,254,274,288,294,296],(0,128):[248,294,320,326,335,338],(1,64):[141,192,232,257,273,284],(1,128):[163,221,265,294,308,328]}
fa2a_comb={(0,64):[132,N,162,171,175,176],(0,128):[N,N,187,196,201,203],(1,64):[88,119,140,156,165,171],(1,128):[99,133,155,173,182,189]}
rows=[]
def add(lib,fam,p,c,hd,s,t,src): rows.append(f"{lib},{fam},{p},{'causal' if c else 'full'},{hd},{s},{16384//s},{2048//hd},{t:.4g},{src}")
for (lib,c,hd),v in fwd.items():
  for s,t in zip(seqs,v):
    if t: add(lib,'hopper','fwd',c,hd,s,t,FA3F if lib!='fa2' else FA3F.replace('Fig. 5 forward','Fig. 5 forward (its FlashAttention-2 bars)'))
for (lib,hd),v in bwd_full.items():
  for s,t in zip(seqs,v):
    add(lib,'hopper','bwd',0,hd,s,t,FA3B if lib!='fa2' else FA3B+" (its FlashAttention-2 bars)")
# FA2 backward causal on Hopper: from the fwd+bwd chart and the forward chart (3.5F/Tc = F/Tf + 2.5F/Tb).
for hd in (64,128):
  for i,s in enumerate(seqs):
    tc=fa2h_comb[(1,hd)][i]; tf=fwd[('fa2',1,hd)][i]
    add('fa2','hopper','bwd',1,hd,s,2.5/(3.5/tc-1/tf),"derived: "+FA2H+" less the forward time of FA3 paper Fig. 5's FlashAttention-2 bars")
# FA3 / cuDNN backward causal: not published; the forward's causal/full ratio at the same shape carried to the backward.
for lib in ('fa3','cudnn'):
  for hd in (64,128):
    for i,s in enumerate(seqs):
      ff=fwd[(lib,0,hd)][i]; fc=fwd[(lib,1,hd)][i]
      if ff is None: continue
      add(lib,'hopper','bwd',1,hd,s,bwd_full[(lib,hd)][i]*fc/ff,f"assumed: {lib} backward full (FA3 paper Fig. 6) x its forward causal/full ratio at the same shape (Fig. 5); no causal backward is published")
# FA2 on A100: fwd+bwd only; split by FA2's own fwd/bwd ratio on H100 (same kernel code, the Ampere path).
for (c,hd),v in fa2a_comb.items():
  for i,s in enumerate(seqs):
    tc=v[i]
    if tc is None: continue
    h_f=fwd[('fa2',c,hd)][i]
    h_b=bwd_full[('fa2',hd)][i] if c==0 else 2.5/(3.5/fa2h_comb[(1,hd)][i]-1/fwd[('fa2',1,hd)][i])
    r=h_f/h_b; tf=(1+2.5*r)*tc/3.5; tb=tf/r
    src="derived: "+FA2A+", split into passes by FlashAttention-2's forward/backward ratio on H100 (FA3 paper Figs. 5-6)"
    add('fa2','ampere','fwd',c,hd,s,tf,src); add('fa2','ampere','bwd',c,hd,s,tb,src)
hdr="""# Attention kernels' attained throughput on one GPU, from published single-GPU benchmarks.
# Each row: the benchmark's shape (FlashAttention's: batch x seqlen = 16k tokens, hidden 2048, so heads = 2048 / head_dim),
# and its TFLOP/s in FlashAttention's convention (benchmarks/benchmark_flash_attention.py: 4 * seqlen^2 * head_dim *
# batch * heads forward, half of it causal, backward 2.5x forward). BF16/FP16. The source column says where the figure
# comes from: read off a published chart's bar label, derived from two published figures (the arithmetic named), or
# assumed (no published figure; the assumption named). A100 figures are FlashAttention-2's only: neither FA3 nor a cuDNN
# chart covers Ampere here. Not published, so not here: head dims 32 and 256 backward (the nearest row holds: reports say so).
library,family,pass,mask,head_dim,seqlen,batch,heads,tflops,source
"""
open(__import__('os').path.join(__import__('os').path.dirname(__file__), '..', 'topologies', 'kernels', 'published.csv'), 'w').write(hdr+"\n".join(rows)+"\n")
print(len(rows))
