# Makes the reference values of tests/unit/test_stats_noise.py (see noise_README.md).
# Run from the repository root:  Rscript tests/vectors/noise_vectors.R
out <- "tests/vectors"
rows <- list()

# 1. the minimum detectable effect of a two-sample t test: R's power.t.test (stats package)
for (n in c(5, 8, 20)) {
  d <- power.t.test(n = n, sd = 1, sig.level = 0.05, power = 0.8, strict = TRUE, tol = 1e-12)$delta
  rows[[length(rows) + 1]] <- data.frame(kind = "power.t.test", n = n, df = 2 * n - 2, x = "", value = d)
}
# 2. the same with the error df of a 2^k r factorial (a main effect: two halves of N runs, df =
#    2^k (r - 1)), from the noncentral t distribution (ncp = d sqrt(n / 2)) and uniroot
power_df <- function(d, n, df, a = 0.05) {
  q <- qt(1 - a / 2, df); ncp <- d * sqrt(n / 2)
  pt(q, df, ncp, lower.tail = FALSE) + pt(-q, df, ncp)
}
# n = N/2 and df for 2^2 x 4, 2^3 x 4 and 2^1 x 4 runs
for (design in list(c(8, 12), c(16, 24), c(4, 6))) {
  n <- design[1]; df <- design[2]
  d <- uniroot(function(d) power_df(d, n, df) - 0.8, c(0.01, 20), tol = 1e-12)$root
  rows[[length(rows) + 1]] <- data.frame(kind = "noncentral_t", n = n, df = df, x = "", value = d)
}
# 3. the coefficient of variation with Vangel's modified McKay interval (Vangel 1996, eq. 16),
#    as Kevin Wright's confint.cv (method "modmckay") computes it, on its own example data
x <- c(326, 302, 307, 299, 329)
v <- length(x) - 1; k <- sd(x) / mean(x)
for (alpha in c(0.05, 0.10)) {
  u1 <- qchisq(1 - alpha / 2, v); u2 <- qchisq(alpha / 2, v)
  lower <- k / sqrt(((u1 + 2) / (v + 1) - 1) * k * k + u1 / v)
  upper <- k / sqrt(((u2 + 2) / (v + 1) - 1) * k * k + u2 / v)
  rows[[length(rows) + 1]] <- data.frame(kind = "cv_modmckay", n = length(x), df = v,
                                         x = paste(x, collapse = " "),
                                         value = c(k, lower, upper))
  rows[[length(rows)]]$name <- NULL
  rows[[length(rows)]]$what <- c("cv", "cv_low", "cv_high")
  rows[[length(rows)]]$alpha <- alpha
}
res <- do.call(rbind, lapply(rows, function(r) {
  if (is.null(r$what)) r$what <- "delta"
  if (is.null(r$alpha)) r$alpha <- 0.05
  r
}))
write.csv(res, file.path(out, "noise_results.csv"), row.names = FALSE)
options(digits = 15)
print(res, row.names = FALSE)
cat(R.version.string, "\n")
