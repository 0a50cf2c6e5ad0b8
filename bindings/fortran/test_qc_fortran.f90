! test_qc_fortran.f90 - the Fortran bindings without MPI (ctest fortran.bindings).
!
! Checks that the bind(c) structs have the C layout (qc_policy_init fills
! exactly the defaults the C macros give), and drives every friendly routine
! once: codecs, error buffers, emulation, a one-rank local group, statuses
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
  real(c_float), allocatable :: x(:), y(:), sends(:, :), recvs(:, :)
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
  call check(c_sizeof(p) == 64_c_size_t, 'qc_policy_t has the C layout (64 bytes on LP64)')
  q = qc_policy_t()   ! the component defaults, which mirror QC_POLICY_INIT
  call check(p%codec == q%codec .and. p%bits == q%bits .and. p%bucket_size == q%bucket_size .and. &
             p%rounding == q%rounding .and. p%algorithm == q%algorithm .and. &
             p%error_feedback == q%error_feedback .and. p%group_size == q%group_size .and. &
             p%topk_ratio == q%topk_ratio .and. p%scale_update_period == q%scale_update_period .and. &
             p%seed == q%seed .and. p%min_compress_bytes == q%min_compress_bytes, &
             'policy defaults from C equal the Fortran component defaults')
  call qc_comm_config_init(cfg, ierr)
  call check(ierr == QC_SUCCESS .and. cfg%struct_size == c_sizeof(cfg), 'qc_comm_config_init')
  call check(cfg%transport == QC_TRANSPORT_LOCAL .and. cfg%timeout_seconds == 300.0_c_double .and. &
             .not. c_associated(cfg%nccl_comm), 'config defaults')

  ! --- codecs on their own ----------------------------------------------
  allocate(x(n), y(n))
  do i = 1, n
    x(i) = sin(0.01 * i)
  end do
  p = qc_policy_t(codec=QC_CODEC_MINMAX, bits=8)
  call qc_encoded_size(p, n, max_bytes, ierr)
  call check(ierr == QC_SUCCESS .and. max_bytes > 32 .and. max_bytes < 4 * n, 'qc_encoded_size')
  call qc_encode(p, x, message, ierr)
  call check(ierr == QC_SUCCESS .and. size(message) > 0 .and. size(message) <= max_bytes, 'qc_encode')
  call qc_decode(message, y, ierr)
  call check(ierr == QC_SUCCESS .and. maxval(abs(x - y)) <= 2.0 / 255, 'qc_decode round trip')
  call qc_decode(message, y(1:n - 1), ierr)
  call check(ierr == QC_ERROR_MISMATCH, 'qc_decode with the wrong count: MISMATCH')

  ! --- errors: C-side and Fortran-side ----------------------------------
  call qc_encoded_size(qc_policy_t(bits=99), n, max_bytes, ierr)
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

  ! --- a one-rank local group: collectives, policies, stats -------------
  call qc_comm_create_local(comms, ierr)
  call check(ierr == QC_SUCCESS, 'qc_comm_create_local')
  call qc_comm_rank(comms(1), rank)
  call qc_comm_size(comms(1), nsize)
  call check(rank == 0 .and. nsize == 1, 'rank 0 of 1')
  call qc_set_layer_policy(comms(1), 'fc*', qc_policy_t(codec=QC_CODEC_MINMAX, bits=8, error_feedback=1))
  call qc_get_layer_policy(comms(1), 'fc1.weight', q)
  call check(q%codec == QC_CODEC_MINMAX .and. q%bits == 8, 'glob policy resolves')
  call qc_get_layer_policy(comms(1), policy=q)
  call check(q%codec == QC_CODEC_NONE, 'default policy')
  call qc_policy_preset(comms(1), 'cgx', qc_policy_t(codec=QC_CODEC_MINMAX, bits=4), ierr=ierr)
  call check(ierr == QC_SUCCESS, 'cgx preset')
  call qc_get_layer_policy(comms(1), 'encoder.0.attn.bias', q)
  call check(q%codec == QC_CODEC_NONE, 'cgx: biases in full precision')
  call qc_get_layer_policy(comms(1), 'encoder.0.attn.weight', q)
  call check(q%codec == QC_CODEC_MINMAX .and. q%bits == 4 .and. q%min_compress_bytes == 16384, &
             'cgx: weights with base, 16 KiB threshold')
  call qc_policy_preset(comms(1), 'nope', ierr=ierr)
  call check(ierr == QC_ERROR_INVALID_ARGUMENT, 'unknown preset')
  call qc_set_layer_policy(comms(1), '*', qc_policy_t())
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
  call qc_error_buffer_destroy(eb)
  call qc_comm_destroy(comms(1))
  call qc_comm_destroy(comms(1))   ! NULL: does nothing

  ! Main-program allocatables live until exit (they are implicitly saved):
  ! release them so LeakSanitizer sees a clean run.
  if (allocated(x)) deallocate(x)
  if (allocated(y)) deallocate(y)
  if (allocated(sends)) deallocate(sends)
  if (allocated(recvs)) deallocate(recvs)
  if (allocated(message)) deallocate(message)
  if (allocated(image)) deallocate(image)
  if (allocated(msg)) deallocate(msg)

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
