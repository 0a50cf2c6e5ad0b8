! fortran_emulate.f90 - see what 4-bit compression does to an average, from
! Fortran, without MPI (module `qc`, bindings/fortran/qc.f90).
!
! qc_emulate_allreduce runs an allreduce over N virtual ranks in one call
! (threads of this process, on the local transport): column r of a 2-D
! array is rank r-1's buffer. Its result is bit-identical to what N real
! ranks (MPI, NCCL, threads) would get with the same inputs and policy, so
! this is the quickest way to try a policy on your own data.
!
! Here 4 virtual ranks each hold a gradient-like array of 2048 values (a
! small "bias-like" half and a large half, different on every rank and
! every step) and average it over 4 steps with the minmax codec, 4 bits,
! buckets of 128, error feedback on, algorithm SRA. It prints
!   - the size of one 4-bit message against the raw float32 bytes;
!   - step 0 in detail: each rank's first inputs, the exact average (in
!     double) and the compressed one, and their difference;
!   - per step: the worst error against its bound, the relative L2 error of
!     the whole average, and each rank's residual norm (what error feedback
!     carries into the next step);
!   - after the last step, how far the running sum of the outputs drifted
!     from the exact running sum (error feedback keeps it within one step).
! It exits non-zero (error stop) unless
!   - every virtual rank gets the same bits;
!   - each element is within the quantization bound of the exact average;
!   - the running sums stay within one step's bound;
!   - every residual norm is finite and non-zero.
!
! Build: cmake builds it with the Fortran bindings (target
!   qc_example_fortran_emulate; no MPI needed); by hand, with qc installed
!   in $PREFIX:
!   gfortran fortran_emulate.f90 -I$PREFIX/include/qc/fortran \
!            -L$PREFIX/lib -lqc_fortran -lqc
! Run:   ./fortran_emulate   (ctest: example_fortran_emulate)
program fortran_emulate
  use, intrinsic :: iso_c_binding, only: c_float, c_double, c_size_t
  use, intrinsic :: iso_fortran_env, only: error_unit, int64
  use, intrinsic :: ieee_arithmetic, only: ieee_is_finite
  use qc
  implicit none

  integer, parameter :: nranks = 4, count = 2048, steps = 4, bits = 4, bucket = 128
  integer, parameter :: shown = 4   ! elements printed in the step-0 table
  integer :: t, i, j, r, a, b, ok
  type(qc_policy_t) :: policy
  type(qc_error_buffer) :: residuals(nranks)
  real(c_float) :: grads(count, nranks), avgs(count, nranks), mn, mx
  real(c_double) :: exact(count), sum_out(count), sum_exact(count), tol(count)
  real(c_double) :: step(count), prev_step(count)   ! code step s, this and the last step
  real(c_double) :: range, err, worst, worst_err, worst_sum, rel_err, norms(nranks)
  integer(int64) :: message_bytes

  write(*, '(a)') 'qc ' // qc_version_string() // ': allreduce (average) over 4 virtual ranks, emulated'

  ! The policy: what every rank sends. min_compress_bytes = 0 because a
  ! message below it (default 16 KiB; ours is 8 KiB) would go uncompressed.
  policy = qc_policy_t(codec=QC_CODEC_MINMAX, bits=bits, bucket_size=bucket, &
                       error_feedback=1, algorithm=QC_ALGO_SRA, min_compress_bytes=0_c_size_t)
  call qc_codec_encoded_size(policy, count, message_bytes)
  write(*, '(a,i0,a,i0,a,i0,a,f4.1,a)') 'one message of ', count, ' values: ', message_bytes, &
      ' bytes instead of ', 4 * count, ' (', real(4 * count) / real(message_bytes), 'x smaller)'

  ! Error feedback keeps one residual per element and rank between calls.
  ! qc_comm() (a NULL communicator) makes a buffer for emulation: it binds
  ! to its column's rank on first use.
  do r = 1, nranks
    call qc_error_buffer_create(qc_comm(), count, residuals(r))
  end do

  ok = 1
  worst = 0
  worst_sum = 0
  sum_out = 0
  sum_exact = 0
  prev_step = 0
  do t = 0, steps - 1
    do r = 1, nranks
      do i = 1, count
        grads(i, r) = gradient(r - 1, t, i - 1)
      end do
    end do
    avgs = -1

    ! Without ierr a failure prints qc_last_error() and stops the program.
    call qc_emulate_allreduce(grads, avgs, QC_OP_AVG, policy, residuals)

    exact = sum(real(grads, c_double), dim=2) / nranks

    ! Bound: a bucket holding element i lies within i +- (bucket - 1), so
    ! the widest range any rank has in that window bounds the code step
    ! s = range / (2**bits - 1) of that bucket. The output differs from the
    ! exact average by what this step's encodes (worker and server) lose,
    ! about s, plus what error feedback carried in from the previous step,
    ! about that step's s. 1.25 times that leaves room for the residual
    ! widening the range, and 1e-6 for float rounding.
    do i = 1, count
      a = max(1, i - (bucket - 1))
      b = min(count, i + (bucket - 1))
      range = 0
      do r = 1, nranks
        mn = minval(grads(a:b, r))
        mx = maxval(grads(a:b, r))
        range = max(range, real(mx - mn, c_double))
      end do
      step(i) = range / (2**bits - 1)
      tol(i) = 1.25d0 * (step(i) + prev_step(i)) + 1d-6
      prev_step(i) = step(i)
    end do

    if (t == 0) then
      write(*, '(/,a)') 'step 0, the first elements:'
      write(*, '(a8,*(a12))') 'element', ('rank ' // achar(iachar('0') + r - 1), r = 1, nranks), &
          'exact avg', 'qc avg', 'error'
      do i = 1, shown
        write(*, '(i8,*(f12.6))', advance='no') i, (grads(i, r), r = 1, nranks), exact(i), avgs(i, 1)
        write(*, '(es12.2)') avgs(i, 1) - exact(i)
      end do
      write(*, '(a)') '(elements 1..1024 are small, 1025..2048 large: each bucket gets its own scale)'
      write(*, '(/,a)') ' step  worst |error|  its bound  rel. L2 error   residual norm of each rank'
    end if

    do r = 2, nranks
      if (any(avgs(:, r) /= avgs(:, 1))) then
        write(error_unit, '(a,i0,a,i0,a)') 'fortran_emulate: step ', t, ': rank ', r - 1, &
            ' got other bits than rank 0'
        ok = 0
      end if
    end do
    worst_err = 0
    j = 1
    do i = 1, count
      err = abs(avgs(i, 1) - exact(i))
      sum_out(i) = sum_out(i) + avgs(i, 1)
      sum_exact(i) = sum_exact(i) + exact(i)
      if (.not. (err <= tol(i))) then
        if (ok == 1) write(error_unit, '(a,i0,a,i0,3(a,es12.5))') 'fortran_emulate: step ', t, &
            ': element ', i, ' is ', avgs(i, 1), ', exact average ', exact(i), ', bound ', tol(i)
        ok = 0
      end if
      if (err > worst_err) then
        worst_err = err
        j = i
      end if
      worst = max(worst, err / tol(i))
    end do
    do r = 1, nranks
      call qc_error_buffer_norm(residuals(r), norms(r))
      if (.not. (ieee_is_finite(norms(r)) .and. norms(r) > 0)) then
        write(error_unit, '(a,i0,a,i0,a,es12.5)') 'fortran_emulate: step ', t, ': rank ', r - 1, &
            ' residual norm ', norms(r)
        ok = 0
      end if
    end do
    ! ||qc avg - exact|| / ||exact||: how much of the average 4 bits lost.
    rel_err = norm2(avgs(:, 1) - exact) / norm2(exact)
    write(*, '(i5,es15.4,es11.4,es15.4,3x,*(f9.4))') t, worst_err, tol(j), rel_err, norms
  end do

  ! Error feedback: what one step drops, the next sends, so the running sum
  ! of outputs differs from the exact running sum only by the residuals still
  ! held after the last step: about one step's s, 1.25 s allowed.
  do i = 1, count
    err = abs(sum_out(i) - sum_exact(i))
    tol(i) = 1.25d0 * step(i) + 1d-6
    if (.not. (err <= tol(i))) then
      if (ok == 1) write(error_unit, '(a,i0,3(a,es12.5))') 'fortran_emulate: element ', i, &
          ' drifted: sum over steps ', sum_out(i), ', exact ', sum_exact(i), ', bound ', tol(i)
      ok = 0
    end if
    worst_sum = max(worst_sum, err / tol(i))
  end do

  write(*, '(/,a,i0,a,f4.2,a)') 'over ', steps, ' steps the worst element error was ', worst, &
      ' of its bound;'
  write(*, '(a,f4.2,a)') 'the running sum of the outputs stayed within ', worst_sum, &
      ' of one step''s bound of the exact running sum (error feedback at work)'

  do r = 1, nranks
    call qc_error_buffer_destroy(residuals(r))
  end do
  if (ok /= 1) then
    write(*, '(a)') 'fortran_emulate: FAILED'
    error stop 1
  end if
  write(*, '(a)') 'fortran_emulate: OK'

contains

  ! Rank r's gradient at step t, element i (both 0-based): a slow wave per
  ! rank, small in the first half (a "bias-like" layer), large in the second.
  pure function gradient(r, t, i) result(v)
    integer, intent(in) :: r, t, i
    real(c_float) :: v
    real(c_double) :: scale
    scale = merge(0.1d0, 1.0d0, i < count / 2)
    v = real(scale * sin(0.003d0 * (i + 1) * (r + 1) + 0.3d0 * t) + 0.02d0 * (r - t), c_float)
  end function gradient

end program fortran_emulate
