//! braid's linear programs: the OLMS and DaMPS LPs modelled with good_lp, their exact fast
//! solvers for hot-path sizes, and dependent rounding.
#![warn(missing_docs)]
