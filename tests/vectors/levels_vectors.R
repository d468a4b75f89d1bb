# Makes the reference values of tests/unit/test_stats_levels.py (see levels_README.md).
# Run from the repository root:  Rscript tests/vectors/levels_vectors.R
suppressPackageStartupMessages(library(lme4))
out <- "tests/vectors"

# 1. runs_per_instance = 3: a 2^2 design (A, B: -1/+1), 3 instances per configuration, 3 runs on
#    each instance. Every instance gets its own CPU cap (instance sd 3), runs vary little (sd 0.5),
#    and neither factor has any effect. The seed is the first from 1 for which an ordinary
#    least-squares fit over the runs calls A significant (p < 0.05): the data set on which an
#    analysis that ignores the instances is wrong.
make_split <- function(seed) {
  set.seed(seed)
  d <- expand.grid(run = 1:3, i = 1:3, A = c(-1, 1), B = c(-1, 1))
  d$instance <- sprintf("A%+dB%+d-vm%d", d$A, d$B, d$i)
  u <- rnorm(12, 0, 3)
  d$y <- round(100 + u[as.integer(factor(d$instance, levels = unique(d$instance)))] +
               rnorm(nrow(d), 0, 0.5), 4)
  d[, c("A", "B", "instance", "run", "y")]
}
seed <- 1
repeat {
  split <- make_split(seed)
  if (anova(lm(y ~ factor(A) * factor(B), data = split))["factor(A)", "Pr(>F)"] < 0.05) break
  seed <- seed + 1
}
cat("split-plot data set: seed", seed, "\n")
write.csv(split, file.path(out, "levels_split.csv"), row.names = FALSE)

rows <- list()
fixed_rows <- function(name, fit) {
  co <- summary(fit)$coefficients
  df <- summary(lmerTest::as_lmerModLmerTest(fit))$coefficients[, "df"]
  term <- sub("(Intercept)", "I", rownames(co), fixed = TRUE)
  term <- term[seq_len(nrow(co))]
  vc <- as.data.frame(VarCorr(fit))
  rbind(data.frame(dataset = name, kind = "fixed", name = term, value = co[, "Estimate"],
                   se = co[, "Std. Error"], df = df, p = NA),
        data.frame(dataset = name, kind = "variance", name = sub("Residual", "residual", vc$grp),
                   value = vc$vcov, se = NA, df = NA, p = NA))
}

# the mixed model with the instance as a random level
fit <- lmer(y ~ A * B + (1 | instance), data = split, REML = TRUE)
rows$split_reml <- fixed_rows("split_reml", fit)
# the exact expected-mean-squares F-tests: the instance stratum of a split-plot ANOVA
wp <- summary(aov(y ~ factor(A) * factor(B) + Error(instance), data = split))
wp <- wp[["Error: instance"]][[1]]
terms <- c("A", "B", "A:B")
rows$split_ems <- data.frame(dataset = "split_ems", kind = "F", name = terms,
                             value = wp[1:3, "F value"], se = NA, df = wp["Residuals", "Df"],
                             p = wp[1:3, "Pr(>F)"])
# ordinary least squares over the runs (the wrong error term)
ols <- anova(lm(y ~ factor(A) * factor(B), data = split))
rows$split_ols <- data.frame(dataset = "split_ols", kind = "F", name = terms,
                             value = ols[1:3, "F value"], se = NA, df = ols["Residuals", "Df"],
                             p = ols[1:3, "Pr(>F)"])

# 2. hosts as fixed blocks (sum-to-zero contrasts): lme4_perf.csv of lme4_vectors.R
perf <- read.csv(file.path(out, "lme4_perf.csv"))
fit <- lmer(time ~ A * B + host + (1 | instance), data = perf, REML = TRUE,
            contrasts = list(host = "contr.sum"))
rows$perf_blocks <- fixed_rows("perf_blocks", fit)
rows$perf_blocks <- rows$perf_blocks[!grepl("^host", rows$perf_blocks$name) |
                                     rows$perf_blocks$kind == "variance", ]

# 3. a fleet: 3 hosts, every configuration of the 2^2 design on each host on 2 instances with
#    2 runs each; hosts differ (sd 2), the effect of A differs between hosts (host x configuration
#    sd 1.5), instances sd 1, runs sd 0.5; A raises y by 2 (q = 1) on average over hosts
set.seed(20261203)
fleet <- expand.grid(run = 1:2, i = 1:2, A = c(-1, 1), B = c(-1, 1), h = 1:3)
fleet$host <- sprintf("h%d", fleet$h)
fleet$config <- sprintf("%s|A%+dB%+d", fleet$host, fleet$A, fleet$B)
fleet$instance <- sprintf("%s-vm%d", fleet$config, fleet$i)
u_h <- rnorm(3, 0, 2); u_c <- rnorm(12, 0, 1.5); u_i <- rnorm(24, 0, 1)
ci <- as.integer(factor(fleet$config, levels = unique(fleet$config)))
ii <- as.integer(factor(fleet$instance, levels = unique(fleet$instance)))
fleet$y <- round(50 + fleet$A + u_h[fleet$h] + u_c[ci] + u_i[ii] + rnorm(nrow(fleet), 0, 0.5), 4)
fleet <- fleet[, c("host", "config", "instance", "run", "A", "B", "y")]
write.csv(fleet, file.path(out, "levels_fleet.csv"), row.names = FALSE)
fit <- lmer(y ~ A * B + (1 | host) + (1 | config) + (1 | instance), data = fleet, REML = TRUE)
rows$fleet <- fixed_rows("fleet", fit)

res <- do.call(rbind, rows)
write.csv(res, file.path(out, "levels_results.csv"), row.names = FALSE)
options(digits = 15)
print(res, row.names = FALSE)
cat(R.version.string, "; lme4 ", as.character(packageVersion("lme4")),
    "; lmerTest ", as.character(packageVersion("lmerTest")), "\n", sep = "")
