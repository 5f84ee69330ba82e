"""Fits: the scaling-law forms and their engine (`laws`), approaches 1-3 and the single-variable
laws (`fit`, `envelope`, `isoflop`, `powerlaw`), the bootstrap and identification of every
estimate, the laws compared on held-out runs (`compare_laws`), predictions (`predict`) and the
text summary of a fit (`summary`)."""
