! test_qc_fortran.f90 - the Fortran bindings without MPI (ctest fortran.bindings).
!
! Checks that the bind(c) structs have the C layout (qc_policy_init fills
! exactly the defaults the C macros give; the raw functions accept
! struct_size = c_sizeof for every struct), and drives every friendly routine
! once: codecs, error buffers, emulation, a one-rank local group, fused
! segments, per-layer statistics and names, adaptive widths, statuses
! through ierr and qc_last_error_message(). Exits non-zero on any failure.
program test_qc_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64, error_unit
  use qc
  implicit none

  integer, parameter :: n = 1000, nranks = 4
  integer :: failures = 0
  integer :: ierr, i, r, rank, nsize
  type(qc_policy_t) :: p, q
  type(qc_comm_config_t) :: cfg
  type(qc_comm) :: comms(1)
  type(qc_error_buffer) :: eb, ebs(nranks)
  type(qc_stats_t) :: stats
  type(qc_layer_stats_t) :: lstats
  type(qc_adapt_config_t) :: acfg
  type(qc_adapt_report_t), target :: report
  type(qc_comm) :: solo(1)
  type(qc_comm) :: pair(2)
  integer :: async
  character(len=8), parameter :: seg_names(2) = [character(len=8) :: 'seg.a', 'seg.b']
  character(len=:), allocatable :: lname
  integer :: nlayers
  real(c_float), allocatable :: x(:), y(:), sends(:, :), recvs(:, :), recvs2(:, :)
  integer(c_int8_t), allocatable :: message(:), image(:)
  integer(int64) :: max_bytes
  real(c_double) :: norm, norm2
  character(len=:), allocatable :: msg

  ! --- versions and layouts ---------------------------------------------
  call check(qc_version_number() / 100 == QC_HEADER_VERSION_NUMBER / 100, 'library major.minor = module')
  call check(len(qc_version_string()) >= 5, 'version string "' // qc_version_string() // '"')
  call check(qc_status_string(QC_ERROR_TIMEOUT) == 'QC_ERROR_TIMEOUT', 'status string')

  call qc_policy_init(p, ierr)
  call check(ierr == QC_SUCCESS, 'qc_policy_init')
  call check(p%struct_size == c_sizeof(p), 'policy struct_size is the C sizeof')
  call check(c_sizeof(p) == 72_c_size_t, 'qc_policy_t has the C layout (72 bytes on LP64)')
  q = qc_policy_t()   ! the component defaults, which mirror QC_POLICY_INIT
  call check(p%codec == q%codec .and. p%bits == q%bits .and. p%bucket_size == q%bucket_size .and. &
             p%rounding == q%rounding .and. p%algorithm == q%algorithm .and. &
             p%error_feedback == q%error_feedback .and. p%group_size == q%group_size .and. &
             p%topk_ratio == q%topk_ratio .and. p%scale_update_period == q%scale_update_period .and. &
             p%seed == q%seed .and. p%min_compress_bytes == q%min_compress_bytes .and. &
             p%scale == q%scale .and. p%rounding == QC_ROUND_AUTO .and. p%scale == QC_SCALE_AUTO, &
             'policy defaults from C equal the Fortran component defaults')
  call qc_comm_config_init(cfg, ierr)
  call check(ierr == QC_SUCCESS .and. cfg%struct_size == c_sizeof(cfg), 'qc_comm_config_init')
  call check(cfg%transport == QC_TRANSPORT_LOCAL .and. cfg%timeout_seconds == 300.0_c_double .and. &
             .not. c_associated(cfg%nccl_comm), 'config defaults')

  ! The raw init functions take the caller's size (never read from the
  ! struct), fill that many bytes and set struct_size to it; a size larger
  ! than the library's struct is QC_ERROR_VERSION.
  p = qc_policy_t(bits=1)
  p%struct_size = 12345
  call check(qc_policy_init_sized_c(p, c_sizeof(p)) == QC_SUCCESS .and. p%struct_size == c_sizeof(p) &
             .and. p%bits == 4, 'qc_policy_init_sized_c fills all of c_sizeof(qc_policy_t)')
  cfg = qc_comm_config_t(timeout_seconds=1.0_c_double)
  call check(qc_comm_config_init_sized_c(cfg, c_sizeof(cfg)) == QC_SUCCESS .and. &
             cfg%struct_size == c_sizeof(cfg) .and. cfg%timeout_seconds == 300.0_c_double, &
             'qc_comm_config_init_sized_c fills all of c_sizeof(qc_comm_config_t)')
  call check(qc_policy_init_sized_c(p, c_sizeof(p) + 8) == QC_ERROR_VERSION, &
             'a size beyond the C struct: VERSION')
  ! LP64 sizes of the C structs (qc_layer_stats_t and qc_adapt_report_t
  ! are also checked exactly by the library below: it takes no other size).
  call check(c_sizeof(cfg) == 40_c_size_t, 'qc_comm_config_t is 40 bytes')
  call check(c_sizeof(stats) == 56_c_size_t, 'qc_stats_t is 56 bytes')
  call check(c_sizeof(lstats) == 72_c_size_t, 'qc_layer_stats_t is 72 bytes')
  call check(c_sizeof(acfg) == 64_c_size_t, 'qc_adapt_config_t is 64 bytes')
  call check(c_sizeof(report) == 56_c_size_t, 'qc_adapt_report_t is 56 bytes')

  ! --- codecs on their own ----------------------------------------------
  allocate(x(n), y(n))
  do i = 1, n
    x(i) = sin(0.01 * i)
  end do
  p = qc_policy_t(codec=QC_CODEC_MINMAX, bits=8)
  call qc_codec_encoded_size(p, n, max_bytes, ierr)
  call check(ierr == QC_SUCCESS .and. max_bytes > 32 .and. max_bytes < 4 * n, 'qc_codec_encoded_size')
  call qc_codec_encode(p, x, message, ierr)
  call check(ierr == QC_SUCCESS .and. size(message) > 0 .and. size(message) <= max_bytes, 'qc_codec_encode')
  call qc_codec_decode(message, y, ierr)
  call check(ierr == QC_SUCCESS .and. maxval(abs(x - y)) <= 2.0 / 255, 'qc_codec_decode round trip')
  call qc_codec_decode(message, y(1:n - 1), ierr)
  call check(ierr == QC_ERROR_MISMATCH, 'qc_codec_decode with the wrong count: MISMATCH')

  ! --- errors: C-side and Fortran-side ----------------------------------
  call qc_codec_encoded_size(qc_policy_t(bits=99), n, max_bytes, ierr)
  msg = qc_last_error_message()
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(msg, 'bits') > 0, &
             'bits 99 rejected by C with a message: ' // msg)

  ! --- emulation with error feedback -------------------------------------
  allocate(sends(n, nranks), recvs(n, nranks))
  do r = 1, nranks
    do i = 1, n
      sends(i, r) = cos(0.003 * i * r) + 0.1 * r
    end do
    call qc_error_buffer_create(qc_comm(), n, ebs(r), ierr)
    call check(ierr == QC_SUCCESS, 'emulation error buffer')
  end do
  p = qc_policy_t(codec=QC_CODEC_MINMAX, bits=4, algorithm=QC_ALGO_SRA, error_feedback=1, &
                  min_compress_bytes=0_c_size_t)   ! a small array: compress anyway
  call qc_emulate_allreduce(sends, recvs, QC_OP_AVG, p, ebs, ierr)
  call check(ierr == QC_SUCCESS, 'qc_emulate_allreduce')
  do r = 2, nranks
    call check(all(recvs(:, r) == recvs(:, 1)), 'emulated ranks agree bit for bit')
  end do
  call check(maxval(abs(recvs(:, 1) - sum(sends, dim=2) / nranks)) < 0.2, 'emulated average is close')
  call qc_error_buffer_norm(ebs(1), norm, ierr)
  call check(ierr == QC_SUCCESS .and. norm > 0 .and. norm < 1d3, 'residual norm after emulation')
  call qc_error_buffer_save(ebs(1), image, ierr)
  call check(ierr == QC_SUCCESS .and. size(image) == 56 + 4 * n, 'qc_error_buffer_save size')
  call qc_error_buffer_reset(ebs(1), ierr)
  call qc_error_buffer_norm(ebs(1), norm2, ierr)
  call check(norm2 == 0, 'reset clears the residuals')
  call qc_error_buffer_load(ebs(1), image, ierr)
  call qc_error_buffer_norm(ebs(1), norm2, ierr)
  call check(ierr == QC_SUCCESS .and. norm2 == norm, 'load restores the residuals')
  image(size(image)) = not(image(size(image)))
  call qc_error_buffer_load(ebs(1), image, ierr)
  call check(ierr == QC_ERROR_CORRUPT_DATA, 'a damaged image: CORRUPT_DATA')
  do r = 1, nranks
    call qc_error_buffer_destroy(ebs(r))
  end do
  call check(.not. c_associated(ebs(1)%ptr), 'destroy resets the handle')
  call qc_emulate_alltoall(sends, recvs, qc_policy_t(), ierr)
  call check(ierr == QC_SUCCESS .and. all(recvs(1:n / nranks, 2) == sends(n / nranks + 1:2 * n / nranks, 1)), &
             'emulated alltoall, codec none')
  ! A layer's call index keys stochastic rounding: call 3 of "fc1" is not its call 0.
  allocate(recvs2(n, nranks))
  p = qc_policy_t(codec=QC_CODEC_QSGD, bits=4, rounding=QC_ROUND_STOCHASTIC, min_compress_bytes=0_c_size_t)
  call qc_emulate_allreduce(sends, recvs, QC_OP_SUM, p, ierr=ierr, layer='fc1')
  call check(ierr == QC_SUCCESS, 'qc_emulate_allreduce, layer fc1, call 0')
  call qc_emulate_allreduce(sends, recvs2, QC_OP_SUM, p, ierr=ierr, layer='fc1', call_index=3_c_int64_t)
  call check(ierr == QC_SUCCESS .and. any(recvs2 /= recvs), 'call_index 3 draws other bits than call 0')
  call qc_emulate_allreduce(sends, recvs2, QC_OP_SUM, p, ierr=ierr, layer='fc1', call_index=0_c_int64_t)
  call check(ierr == QC_SUCCESS .and. all(recvs2 == recvs), 'call_index 0 is the default')
  deallocate(recvs2)

  ! --- a one-rank local group: collectives, policies, stats -------------
  call qc_comm_create_local(comms, ierr)
  call check(ierr == QC_SUCCESS, 'qc_comm_create_local')
  call qc_comm_rank(comms(1), rank)
  call qc_comm_size(comms(1), nsize)
  call check(rank == 0 .and. nsize == 1, 'rank 0 of 1')
  call qc_comm_set_layer_policy(comms(1), 'fc*', qc_policy_t(codec=QC_CODEC_MINMAX, bits=8, error_feedback=1))
  call qc_comm_get_layer_policy(comms(1), 'fc1.weight', q)
  call check(q%codec == QC_CODEC_MINMAX .and. q%bits == 8, 'glob policy resolves')
  call qc_comm_get_layer_policy(comms(1), policy=q)
  call check(q%codec == QC_CODEC_NONE, 'default policy')
  call qc_comm_apply_preset(comms(1), 'cgx', qc_policy_t(codec=QC_CODEC_MINMAX, bits=4), ierr=ierr)
  call check(ierr == QC_SUCCESS, 'cgx preset')
  call qc_comm_get_layer_policy(comms(1), 'encoder.0.attn.bias', q)
  call check(q%codec == QC_CODEC_NONE, 'cgx: biases in full precision')
  call qc_comm_get_layer_policy(comms(1), 'encoder.0.attn.weight', q)
  call check(q%codec == QC_CODEC_MINMAX .and. q%bits == 4 .and. q%min_compress_bytes == 16384, &
             'cgx: weights with base, 16 KiB threshold')
  call qc_comm_apply_preset(comms(1), 'nope', ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT, 'unknown preset')
  call qc_comm_set_layer_policy(comms(1), '*', qc_policy_t())
  call qc_error_buffer_create(comms(1), int(n, int64), eb)
  call qc_allreduce(comms(1), x, y, QC_OP_SUM, layer='fc1.weight', error_buffer=eb, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. maxval(abs(x - y)) <= 2.0 / 255, 'one-rank allreduce, minmax8')
  y = x
  call qc_allreduce_inplace(comms(1), y, QC_OP_AVG, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. all(y == x), 'in place, codec none: exact')
  call qc_alltoall(comms(1), x, y, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. all(y == x), 'one-rank alltoall')
  call qc_allreduce(comms(1), x, y(1:n - 1), QC_OP_SUM, ierr=ierr)
  msg = qc_last_error_message()
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(msg, 'recvbuf') > 0, &
             'size mismatch caught in Fortran: ' // msg)
  call qc_comm_get_stats(comms(1), stats)
  call check(stats%calls == 3 .and. stats%logical_bytes == 3 * 4 * n, 'stats count the calls')
  call qc_comm_get_async_error(comms(1), async)
  call check(async == QC_SUCCESS, 'a healthy group has no async error')
  ! A peer that left breaks the group; the failure stays visible afterwards.
  call qc_comm_create_local(pair, ierr)
  call check(ierr == QC_SUCCESS, 'qc_comm_create_local, two ranks')
  call qc_comm_destroy(pair(2))
  call qc_allreduce(pair(1), x, y, QC_OP_SUM, ierr=ierr)
  call check(ierr == QC_ERROR_TRANSPORT, 'allreduce with a departed peer')
  call qc_comm_get_async_error(pair(1), async, ierr)
  msg = qc_last_error_message()
  call check(ierr == QC_SUCCESS .and. async == QC_ERROR_TRANSPORT .and. &
             index(msg, 'qc_comm_get_async_error') > 0, 'async error of the broken group: ' // msg)
  call qc_comm_destroy(pair(1))
  call qc_error_buffer_destroy(eb)
  call qc_comm_destroy(comms(1))
  call qc_comm_destroy(comms(1))   ! NULL: does nothing

  ! --- fused buffers, per-layer statistics, adaptive widths --------------
  ! A fresh one-rank group, so that every counter starts at zero.
  call qc_comm_create_local(solo, ierr)
  call check(ierr == QC_SUCCESS, 'qc_comm_create_local (segments)')
  y = -1
  ! Default-integer counts; names with trailing blanks (trimmed).
  call qc_allreduce_segments(solo(1), x, y, [300, 700], QC_OP_SUM, seg_names, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. all(y == x), 'segments on one rank, codec none: exact')
  call qc_comm_get_layer_stats(solo(1), 'seg.a', lstats, ierr)
  call check(ierr == QC_SUCCESS .and. lstats%struct_size == c_sizeof(lstats), 'qc_comm_get_layer_stats')
  call check(lstats%calls == 1 .and. lstats%count == 300 .and. lstats%logical_bytes == 4 * 300, &
             'layer stats of segment 1 (calls, count, logical_bytes)')
  call qc_comm_get_layer_stats(solo(1), 'seg.b   ', lstats, ierr)
  call check(ierr == QC_SUCCESS .and. lstats%calls == 1 .and. lstats%count == 700 .and. &
             lstats%logical_bytes == 4 * 700 .and. lstats%mean_sq_norm > 0, &
             'layer stats of segment 2 (name trimmed; mean_sq_norm > 0)')
  call check(abs(lstats%mean_sq_norm - sum(real(x(301:n), c_double)**2)) <= &
             1d-5 * lstats%mean_sq_norm, 'mean_sq_norm is the squared norm of the segment')
  call qc_comm_get_layer_stats(solo(1), 'never.used', lstats, ierr)
  call check(ierr == QC_SUCCESS .and. lstats%calls == 0 .and. lstats%count == 0, 'unused layer: zeros')
  ! 64-bit counts, in place, no names: both segments count as "*".
  y = x
  call qc_allreduce_segments_inplace(solo(1), y, [500_int64, 500_int64], QC_OP_AVG, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. all(y == x), 'segments in place, 64-bit counts')
  call qc_comm_get_layer_stats(solo(1), stats=lstats, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. lstats%calls == 2 .and. lstats%count == 500, &
             'unnamed segments count under "*", once per segment')
  ! The raw interface with struct_size = c_sizeof: the library takes only
  ! sizeof(qc_layer_stats_t), so success proves the sizes agree.
  lstats = qc_layer_stats_t()
  lstats%struct_size = c_sizeof(lstats)
  call check(qc_comm_get_layer_stats_c(solo(1)%ptr, c_null_ptr, lstats) == QC_SUCCESS .and. &
             lstats%struct_size == c_sizeof(lstats) .and. lstats%calls == 2, &
             'qc_comm_get_layer_stats_c accepts c_sizeof(qc_layer_stats_t)')
  ! Layer names, 1-based, in byte order: "*" < "seg.a" < "seg.b".
  call qc_comm_layer_count(solo(1), nlayers, ierr)
  call check(ierr == QC_SUCCESS .and. nlayers == 3, 'qc_comm_layer_count')
  call qc_comm_layer_name(solo(1), 1, lname, ierr)
  call check(ierr == QC_SUCCESS .and. lname == '*' .and. len(lname) == 1, 'layer 1 is "*"')
  call qc_comm_layer_name(solo(1), 2, lname, ierr)
  call check(ierr == QC_SUCCESS .and. lname == 'seg.a' .and. len(lname) == 5, 'layer 2 is "seg.a": ' // lname)
  call qc_comm_layer_name(solo(1), 3, lname, ierr)
  call check(ierr == QC_SUCCESS .and. lname == 'seg.b' .and. len(lname) == 5, 'layer 3 is "seg.b": ' // lname)
  call qc_comm_layer_name(solo(1), 4, lname, ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. len(lname) == 0 .and. &
             index(qc_last_error_message(), 'index') > 0, 'layer 4 of 3: INVALID_ARGUMENT from C')
  call qc_comm_layer_name(solo(1), 0, lname, ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), '>= 1') > 0, &
             'layer 0: INVALID_ARGUMENT (1-based)')
  ! The layer call counts as a checkpoint: 24-byte header, 16 bytes and the name per layer.
  call qc_comm_save_state(solo(1), image, ierr)
  call check(ierr == QC_SUCCESS .and. size(image) == 24 + 3 * 16 + 1 + 5 + 5, 'qc_comm_save_state size')
  call qc_comm_load_state(solo(1), image, ierr)
  call check(ierr == QC_SUCCESS, 'qc_comm_load_state of its own image')
  image(size(image)) = not(image(size(image)))
  call qc_comm_load_state(solo(1), image, ierr)
  call check(ierr == QC_ERROR_CORRUPT_DATA, 'a damaged state image: CORRUPT_DATA')
  ! A bad counts sum fails in Fortran, before C: no call is counted.
  call qc_allreduce_segments(solo(1), x, y, [300, 600], QC_OP_SUM, seg_names, ierr=ierr)
  msg = qc_last_error_message()
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. len(msg) > 0 .and. index(msg, 'sum(counts)') > 0, &
             'counts summing to 900 of 1000: ' // msg)
  call qc_comm_get_layer_stats(solo(1), 'seg.a', lstats)
  call check(lstats%calls == 1, 'the rejected call reached no counter')
  call qc_allreduce_segments(solo(1), x, y, [300, 700], QC_OP_SUM, seg_names(1:1), ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), 'layers') > 0, &
             'one name for two segments: ' // qc_last_error_message())
  call qc_allreduce_segments(solo(1), x, y, [1300, -300], QC_OP_SUM, ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), 'negative') > 0, &
             'a negative count')
  ! Each segment keeps its own policy: seg.b compressed, seg.a exact.
  call qc_comm_set_layer_policy(solo(1), 'seg.b', qc_policy_t(codec=QC_CODEC_MINMAX, bits=8, &
                           min_compress_bytes=0_c_size_t))
  call qc_comm_set_layer_policy(solo(1), 'fc2', qc_policy_t(codec=QC_CODEC_QSGD, bits=4, &
                           min_compress_bytes=0_c_size_t))
  call qc_allreduce_segments(solo(1), x, y, [300, 700], QC_OP_SUM, seg_names, ierr=ierr)
  call check(ierr == QC_SUCCESS .and. all(y(1:300) == x(1:300)) .and. &
             maxval(abs(y(301:n) - x(301:n))) <= 2.0 / 255 .and. any(y(301:n) /= x(301:n)), &
             'segments: codec none and minmax 8 side by side')
  call qc_allreduce(solo(1), x, y, QC_OP_SUM, layer='fc2', ierr=ierr)
  call check(ierr == QC_SUCCESS, 'allreduce of layer fc2 (qsgd)')
  ! Adaptive widths: the adaptable layers are those with minmax or qsgd
  ! (seg.b and fc2); seg.a and "*" (codec none) are left alone.
  call qc_comm_adapt_policies(solo(1), acfg, report, ierr)
  call check(ierr == QC_SUCCESS .and. report%struct_size == c_sizeof(report), 'qc_comm_adapt_policies')
  call check(report%layers == 2 .and. report%e4 > 0 .and. report%error_budget > 0 .and. &
             report%predicted_error <= report%error_budget .and. report%bytes_at_4 > 0 .and. &
             report%predicted_bytes > 0, 'adapt report: 2 layers, within the budget')
  call qc_comm_get_layer_policy(solo(1), 'seg.b', q)
  call check(q%codec == QC_CODEC_MINMAX .and. any(q%bits == [2, 3, 4, 8]), 'seg.b got a width from allowed_bits')
  call qc_comm_get_layer_policy(solo(1), 'seg.a', q)
  call check(q%codec == QC_CODEC_NONE, 'seg.a (codec none) is not adapted')
  call qc_comm_adapt_policies(solo(1), ierr=ierr)
  call check(ierr == QC_SUCCESS, 'qc_comm_adapt_policies with the default config, no report')
  ! Bad configs name the field: the C library reads each one at its offset.
  call qc_comm_adapt_policies(solo(1), qc_adapt_config_t(alpha=0.5_c_double), report, ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), 'alpha') > 0 .and. &
             report%layers == 0, 'adapt: alpha 0.5 refused, report zeroed')
  call qc_comm_adapt_policies(solo(1), qc_adapt_config_t(num_allowed=9), ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), 'num_allowed') > 0, &
             'adapt: num_allowed 9 refused')
  acfg = qc_adapt_config_t()
  acfg%allowed_bits(4) = 9
  call qc_comm_adapt_policies(solo(1), acfg, ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), 'allowed_bits[3]') > 0, &
             'adapt: allowed_bits(4) = 9 refused as allowed_bits[3]')
  call qc_comm_adapt_policies(solo(1), qc_adapt_config_t(method=7), ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT .and. index(qc_last_error_message(), 'method') > 0, &
             'adapt: method 7 refused')
  ! The raw interface: report%struct_size must be exactly sizeof in C.
  acfg = qc_adapt_config_t(method=QC_ADAPT_LINEAR)
  acfg%struct_size = c_sizeof(acfg)
  report = qc_adapt_report_t()
  report%struct_size = c_sizeof(report)
  call check(qc_comm_adapt_policies_c(solo(1)%ptr, acfg, c_loc(report)) == QC_SUCCESS .and. report%layers == 2, &
             'qc_comm_adapt_policies_c accepts c_sizeof of both structs')
  call qc_comm_destroy(solo(1))

  ! Main-program allocatables live until exit (they are implicitly saved):
  ! release them so LeakSanitizer sees a clean run.
  if (allocated(x)) deallocate(x)
  if (allocated(y)) deallocate(y)
  if (allocated(sends)) deallocate(sends)
  if (allocated(recvs)) deallocate(recvs)
  if (allocated(message)) deallocate(message)
  if (allocated(image)) deallocate(image)
  if (allocated(msg)) deallocate(msg)
  if (allocated(lname)) deallocate(lname)

  if (failures > 0) then
    write(error_unit, '(i0,a)') failures, ' check(s) failed'
    error stop 1
  end if
  print '(a)', 'fortran bindings: OK'

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      write(error_unit, '(a)') 'FAILED: ' // what // ' (last error: ' // qc_last_error_message() // ')'
    end if
  end subroutine check

end program test_qc_fortran
