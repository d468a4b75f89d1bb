# Makes the lme4 reference values of tests/unit/test_stats_mixed.py (see lme4_README.md).
# Run from the repository root:  Rscript tests/vectors/lme4_vectors.R
suppressPackageStartupMessages(library(lme4))
out <- "tests/vectors"

# the simulated performance study: 4 hosts x 6 instances x 4 runs; factor A is set per
# instance (3 instances at -1, 3 at +1 on every host), factor B per run (2 runs at each level)
set.seed(20261125)
hosts <- 4; inst <- 6; runs <- 4
perf <- expand.grid(run = 1:runs, i = 1:inst, h = 1:hosts)
perf$host <- sprintf("host%d", perf$h)
perf$instance <- sprintf("host%d-vm%d", perf$h, perf$i)           # unique instance labels
perf$A <- ifelse(perf$i %% 2 == 0, 1, -1)
perf$B <- ifelse(perf$run <= 2, -1, 1)
u_host <- rnorm(hosts, 0, 3); u_inst <- rnorm(hosts * inst, 0, 2)
perf$time <- round(100 + 4 * perf$A + 1.5 * perf$B + 0.5 * perf$A * perf$B +
                   u_host[perf$h] + u_inst[(perf$h - 1) * inst + perf$i] +
                   rnorm(nrow(perf), 0, 1), 4)
perf <- perf[, c("host", "instance", "run", "A", "B", "time")]
perf_unbalanced <- perf[-sort(sample(nrow(perf), 17)), ]

Pastes$sample <- as.character(Pastes$sample)                     # unique cask labels ("A:a")
data <- list(Dyestuff = Dyestuff, Dyestuff2 = Dyestuff2, Pastes = Pastes,
             Penicillin = Penicillin, perf = perf, perf_unbalanced = perf_unbalanced)
calls <- list(
  Dyestuff = quote(lmer(Yield ~ 1 + (1 | Batch), data = Dyestuff, REML = TRUE)),
  Dyestuff2 = quote(lmer(Yield ~ 1 + (1 | Batch), data = Dyestuff2, REML = TRUE)),
  Pastes = quote(lmer(strength ~ 1 + (1 | batch) + (1 | sample), data = Pastes, REML = TRUE)),
  Penicillin = quote(lmer(diameter ~ 1 + (1 | plate) + (1 | sample), data = Penicillin, REML = TRUE)),
  perf = quote(lmer(time ~ A * B + (1 | host) + (1 | instance), data = perf, REML = TRUE)),
  perf_unbalanced = quote(lmer(time ~ A * B + (1 | host) + (1 | instance),
                               data = perf_unbalanced, REML = TRUE)))
rows <- list()
for (name in names(calls)) {
  write.csv(data[[name]], file.path(out, sprintf("lme4_%s.csv", name)), row.names = FALSE)
  fit <- eval(calls[[name]], data)
  co <- summary(fit)$coefficients
  # Satterthwaite df of the same fit, as lmerTest computes them (lmerTest is not attached)
  df <- summary(lmerTest::as_lmerModLmerTest(fit))$coefficients[, "df"]
  term <- sub("(Intercept)", "I", rownames(co), fixed = TRUE)
  vc <- as.data.frame(VarCorr(fit))
  rows[[name]] <- rbind(
    data.frame(dataset = name, kind = "fixed", name = term, value = co[, "Estimate"],
               se = co[, "Std. Error"], df = df, singular = isSingular(fit), REMLcrit = REMLcrit(fit)),
    data.frame(dataset = name, kind = "variance", name = sub("Residual", "residual", vc$grp),
               value = vc$vcov, se = NA, df = NA, singular = isSingular(fit), REMLcrit = REMLcrit(fit)))
  cat(name, ": ", deparse(calls[[name]], width.cutoff = 500L), "\n", sep = "")
}
res <- do.call(rbind, rows)
write.csv(res, file.path(out, "lme4_results.csv"), row.names = FALSE)
options(digits = 15)
print(res, row.names = FALSE)
cat(R.version.string, "; lme4 ", as.character(packageVersion("lme4")),
    "; lmerTest ", as.character(packageVersion("lmerTest")),
    "; Matrix ", as.character(packageVersion("Matrix")), "\n", sep = "")
