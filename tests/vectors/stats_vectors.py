"""Published worked examples for checking labkit.stats, with their sources.

Copied verbatim from the shared repository (shared/test-vectors/stats_vectors.py)
so the unit tests run on a clone with nothing beside it.

Conventions
-----------
* Responses are in standard (Yates) order: the first factor varies fastest,
  -1 is the low level, +1 the high level.
* Jain's ``q`` is half of the Montgomery/Minitab "effect" (effect = 2*q).
* SS_x = 2**k * r * q_x**2.  Allocation of variation: pct_x = 100 * SS_x / SST,
  where SST = sum((y - grand_mean)**2) over every observation (it includes error).

Sources: R. Jain, The Art of Computer Systems Performance Analysis (1991),
chapters 17-18; R's datasets ``sleep``, ``PlantGrowth`` and Shapiro & Wilk (1965).
Every number below was recomputed with scipy/statsmodels and matches the book
or R output, except where a comment says otherwise.
"""

# Jain Ex. 17.1/17.2: 2^2, A = memory size, B = cache size, y = MIPS.
JAIN_22 = dict(
    k=2,
    y=[15, 45, 25, 75],
    q={"I": 40, "A": 20, "B": 10, "AB": 5},
    ss={"A": 1600, "B": 400, "AB": 100},
    sst=2100,
    pct={"A": 76.19, "B": 19.05, "AB": 4.76},  # book rounds to 76, 19, 5
)

# Jain Ex. 17.3: 2^3 (C = number of processors).
JAIN_23 = dict(
    k=3,
    y=[14, 22, 10, 34, 46, 58, 50, 86],
    q={"I": 40, "A": 10, "B": 5, "AB": 5, "C": 20, "AC": 2, "BC": 3, "ABC": 1},
    sst=4512,
    pct={"A": 17.73, "B": 4.43, "AB": 4.43, "C": 70.92, "AC": 0.71, "BC": 1.60, "ABC": 0.18},
)

# Jain Ex. 18.1-18.4: 2^2 with r = 3 replications.  90% confidence intervals.
JAIN_22R3 = dict(
    k=2,
    y=[[15, 18, 12], [45, 48, 51], [25, 28, 19], [75, 75, 81]],
    q={"I": 41, "A": 21.5, "B": 9.5, "AB": 5},
    ss={"A": 5547, "B": 1083, "AB": 300},
    sse=102,
    sst=7032,
    pct={"A": 78.88, "B": 15.40, "AB": 4.27, "E": 1.45},
    s_e=3.5707,
    s_q=1.0308,
    t_90_df8=1.8595,
    ci90={"I": (39.08, 42.92), "A": (19.58, 23.42), "B": (7.58, 11.42), "AB": (3.08, 6.92)},
    F={"A": 435.06, "B": 84.94, "AB": 23.53},  # df (1, 8)
    p={"A": 2.93e-8, "B": 1.56e-5, "AB": 1.27e-3},
    # The book prints the contrast u = qA + qB - 2 qAB as 11; the correct value is 21.
)

# Student, Welch and paired t-tests on R's `sleep` data (t.test output).
SLEEP_G1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_G2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
WELCH = dict(t=-1.8608, df=17.776, p=0.07939, ci95=(-3.3654832, 0.2054832))
STUDENT = dict(t=-1.8608, df=18, p=0.07919, ci95=(-3.363874, 0.203874))
PAIRED = dict(t=-4.0621, df=9, p=0.002833, ci95=(-2.4598858, -0.7001142))

# Shapiro-Wilk (R shapiro.test, same algorithm as scipy.stats.shapiro).
SW_WEIGHTS = dict(x=[148, 154, 158, 160, 161, 162, 166, 170, 182, 195, 236], W=0.78881, p=0.006704)

# One-way ANOVA on R's PlantGrowth.
PG_CTRL = [4.17, 5.58, 5.18, 6.11, 4.50, 4.61, 5.17, 4.53, 5.33, 5.14]
PG_TRT1 = [4.81, 4.17, 4.41, 3.59, 5.87, 3.83, 6.03, 4.89, 4.32, 4.69]
PG_TRT2 = [6.31, 5.12, 5.54, 5.50, 5.37, 5.29, 4.92, 6.15, 5.80, 5.26]
ONEWAY = dict(ss_between=3.766, ss_within=10.492, df=(2, 27), F=4.846, p=0.0159)
