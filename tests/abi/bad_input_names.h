/*
 * bad_input_names.h - the names that the expressions of docs/errors.md use,
 * as macros over the fixture `qct_fx* fx` of the row function (see
 * bad_input_fixture.h). Included twice by the generated file: once before
 * the row functions (defines) and once after them with QCT_NAMES_OFF
 * defined (undefines), so that the names stay out of the rest of the file.
 * No include guard on purpose.
 */
#ifndef QCT_NAMES_OFF

/* Shorthands. */
#define N QCT_N
#define CAP QCT_CAP
#define F32 QC_DTYPE_FLOAT32
#define F16 QC_DTYPE_FLOAT16
#define BF16 QC_DTYPE_BFLOAT16
#define SUM QC_OP_SUM
#define AVG QC_OP_AVG
#define HUGE_COUNT (SIZE_MAX / 2 + 1)

/* The fixture's fields (see qct_fx). */
#define rank (fx->rank)
#define nranks (fx->nranks)
#define comm (fx->comm)
#define buf (fx->buf)
#define out (fx->out)
#define half (fx->half)
#define pol (fx->pol)
#define bigpol (fx->bigpol.policy)
#define cfg (fx->cfg)
#define bigcfg (fx->bigcfg.config)
#define cbs (fx->cbs)
#define stats (fx->stats)
#define bigstats (fx->bigstats.value)
#define lstats (fx->lstats)
#define acfg (fx->acfg)
#define report (fx->report)
#define eb (fx->eb)
#define eb_other (fx->eb_other)
#define eb_emu (fx->eb_emu)
#define spare_comm (fx->spare_comm)
#define spare_comms (fx->spare_comms)
#define spare_eb (fx->spare_eb)
#define spare_sparse (fx->spare_sparse)
#define sparse_idx (fx->sparse_idx)
#define dead_comm (fx->dead_comm)
#define dead_eb (fx->dead_eb)
#define req (fx->req)
#define dead_req (fx->dead_req)
#define msg (fx->msg)
#define msg_len (fx->msg_len)
#define image (fx->image)
#define image_len (fx->image_len)
#define garbage (fx->garbage)
#define sendbufs (fx->sendbufs)
#define recvbufs (fx->recvbufs)
#define counts (fx->counts)
#define layers (fx->layers)
#define ival (fx->ival)
#define sz (fx->sz)
#define dval (fx->dval)
#define name (fx->name)

/* Helpers (bad_input_fixture.h). */
#define heap_copy(p, n) qct_heap_copy(fx, (p), (n))
#define roundtrip(codec) qct_roundtrip(fx, (codec))
#define use_codec(codec) qct_use_codec(fx, (codec))
#define nonfinite_span(st, lo, hi) qct_nonfinite_span(fx, (st), (lo), (hi))
#define finite_residuals(st) qct_finite_residuals(fx, (st))
#define out_untouched(st) qct_out_untouched(fx, (st))
#define cbs_with_rank(r) qct_cbs_with_rank(fx, (r))

#else /* QCT_NAMES_OFF */

#undef N
#undef CAP
#undef F32
#undef F16
#undef BF16
#undef SUM
#undef AVG
#undef HUGE_COUNT
#undef rank
#undef nranks
#undef comm
#undef buf
#undef out
#undef half
#undef pol
#undef bigpol
#undef cfg
#undef bigcfg
#undef cbs
#undef stats
#undef bigstats
#undef lstats
#undef acfg
#undef report
#undef eb
#undef eb_other
#undef eb_emu
#undef spare_comm
#undef spare_comms
#undef spare_eb
#undef spare_sparse
#undef sparse_idx
#undef dead_comm
#undef dead_eb
#undef req
#undef dead_req
#undef msg
#undef msg_len
#undef image
#undef image_len
#undef garbage
#undef sendbufs
#undef recvbufs
#undef counts
#undef layers
#undef ival
#undef sz
#undef dval
#undef name
#undef heap_copy
#undef roundtrip
#undef use_codec
#undef nonfinite_span
#undef finite_residuals
#undef out_untouched
#undef cbs_with_rank
#undef QCT_NAMES_OFF

#endif /* QCT_NAMES_OFF */
