"""The one sampler of every stage (thinker, talker, code predictor): temperature, top-k, top-p, min-p, greedy, and a
seeded draw by the exponential race, with one torch reference (`rules`, the CPU path) and one Triton kernel
(`pick_triton`) that draws the reference's tokens.

The rules are transformers' warpers (the parity reference), applied to `logits / temperature` in this order:
- top-k keeps every score >= the k-th best (ties with the k-th stay, as TopKLogitsWarper); 0 keeps all;
- top-p (TopPLogitsWarper): over the top-k survivors renormalised, sorted ascending, a token drops when the mass at
  and below it is <= 1 - top_p; the most likely token always stays; top_p 1 is off;
- min-p (MinPLogitsWarper): a token drops when its probability is < min_p times the best one's;
- greedy rows take the argmax of the unscaled logits.
The draw: each row has its own generator and, per pick, one uniform U per vocabulary id; the token drawn is
argmax p_i / E_i with E_i = -log U_i ~ Exp(1), an exact draw from the kept distribution that never depends on
which other rows share the batch, nor on the order a top-k returns tied scores in.
"""
