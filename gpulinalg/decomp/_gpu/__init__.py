"""cuSOLVER glue shared by decomp's GPU engines: routine tables per dtype, the batched route table
and stream lanes, finite and transpose helpers."""
