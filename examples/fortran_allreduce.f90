! fortran_allreduce.f90 - average a gradient over MPI ranks with 4-bit codes,
! from Fortran (module `qc`, bindings/fortran/qc.f90).
!
! The Fortran twin of c_mpi_allreduce.c: every rank holds a gradient-like
! array of 10000 values (two "layers" of different magnitude, different on
! every rank and every step) and averages it with qc_allreduce: minmax
! codec, 4 bits, buckets of 128, error feedback on, algorithm SRA, over
! several steps. It exits non-zero unless, on every rank,
!   - every rank gets the same bits;
!   - each element is within the quantization bound of the exact average
!     (computed here in double from every rank's inputs: they are a formula);
!   - summed over the steps, the outputs stay within one step's bound of the
!     exact sums (error feedback carries what was lost to the next step);
!   - the residual norm is finite and non-zero (error feedback is in use).
!
! Build: cmake builds it when Fortran and MPI are found (target
!   qc_example_fortran_allreduce); by hand, with qc installed in $PREFIX:
!   mpif90 fortran_allreduce.f90 -I$PREFIX/include/qc/fortran \
!          -L$PREFIX/lib -lqc_fortran -lqc
! Run:   mpirun -np 3 ./fortran_allreduce   (ctest: example_fortran_allreduce)
program fortran_allreduce
  use, intrinsic :: iso_c_binding, only: c_float, c_double
  use, intrinsic :: iso_fortran_env, only: error_unit
  use, intrinsic :: ieee_arithmetic, only: ieee_is_finite
  use mpi
  use qc
  implicit none

  integer, parameter :: count = 10000, steps = 5, bits = 4, bucket = 128
  integer :: ierr, rank, nranks, t, i, j, r, a, b, ok, all_ok
  type(qc_comm) :: comm
  type(qc_error_buffer) :: residuals
  type(qc_policy_t) :: policy
  real(c_float) :: grad(count), avg(count), lo(count), hi(count), g, mn, mx
  real(c_double) :: exact(count), sum_out(count), sum_exact(count), tol(count)
  real(c_double) :: step(count), prev_step(count)   ! code step s, this and the last step
  real(c_double) :: range, err, worst, worst_sum, norm

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  ! A qc communicator over MPI_COMM_WORLD (qc duplicates it). The timeout
  ! bounds how long a collective waits for a peer that does not arrive.
  ! Without ierr, a failing qc call prints qc_last_error() and stops this
  ! rank with `error stop`; mpirun then ends the job.
  call qc_comm_create_mpi(MPI_COMM_WORLD, comm, timeout=60.0_c_double)

  policy = qc_policy_t(codec=QC_CODEC_MINMAX, bits=bits, bucket_size=bucket, &
                       error_feedback=1, algorithm=QC_ALGO_SRA)
  call qc_comm_set_layer_policy(comm, 'grad', policy)
  call qc_error_buffer_create(comm, count, residuals)

  ok = 1
  worst = 0
  worst_sum = 0
  sum_out = 0
  sum_exact = 0
  prev_step = 0
  do t = 0, steps - 1
    do i = 1, count
      grad(i) = gradient(rank, t, i - 1)
    end do
    ! ierr present: the status comes back instead of stopping the program.
    call qc_allreduce(comm, grad, avg, QC_OP_AVG, layer='grad', error_buffer=residuals, ierr=ierr)
    if (ierr /= QC_SUCCESS) then
      write(error_unit, '(a,i0,a)') 'fortran_allreduce: rank ', rank, ': qc_allreduce failed: ' // &
          qc_status_string(ierr) // ': ' // qc_last_error_message()
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if

    ! The exact average, in double from every rank's inputs.
    do i = 1, count
      exact(i) = 0
      do r = 0, nranks - 1
        exact(i) = exact(i) + gradient(r, t, i - 1)
      end do
      exact(i) = exact(i) / nranks
    end do
    ! Bound: a bucket holding element i lies within i +- (bucket - 1), so the
    ! widest range any rank has in that window bounds the code step
    ! s = range / (2**bits - 1) of that bucket. The output differs from the
    ! exact average by what this step's encodes (worker and server) lose,
    ! about s, plus what error feedback carried in from the previous step,
    ! about that step's s. 1.25 times that leaves room for the residual
    ! widening the range, and 1e-6 for float rounding.
    do i = 1, count
      a = max(1, i - (bucket - 1))
      b = min(count, i + (bucket - 1))
      range = 0
      do r = 0, nranks - 1
        mn = gradient(r, t, a - 1)
        mx = mn
        do j = a, b
          g = gradient(r, t, j - 1)
          mn = min(mn, g)
          mx = max(mx, g)
        end do
        range = max(range, real(mx - mn, c_double))
      end do
      step(i) = range / (2**bits - 1)
      tol(i) = 1.25d0 * (step(i) + prev_step(i)) + 1d-6
      prev_step(i) = step(i)
    end do

    do i = 1, count
      err = abs(avg(i) - exact(i))
      sum_out(i) = sum_out(i) + avg(i)
      sum_exact(i) = sum_exact(i) + exact(i)
      if (.not. (err <= tol(i))) then
        if (ok == 1) write(error_unit, '(a,i0,a,i0,a,i0,3(a,es12.5))') 'fortran_allreduce: rank ', rank, &
            ' step ', t, ': element ', i, ' is ', avg(i), ', exact average ', exact(i), ', bound ', tol(i)
        ok = 0
      end if
      worst = max(worst, err / tol(i))
    end do

    ! Replica consistency: the elementwise min and max over ranks agree.
    call MPI_Allreduce(avg, lo, count, MPI_REAL, MPI_MIN, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(avg, hi, count, MPI_REAL, MPI_MAX, MPI_COMM_WORLD, ierr)
    if (any(lo /= hi)) then
      if (ok == 1) write(error_unit, '(a,i0,a,i0)') 'fortran_allreduce: ranks disagree at step ', t, &
          ', e.g. element ', findloc(lo /= hi, .true., dim=1)
      ok = 0
    end if
  end do

  ! Error feedback: what one step drops, the next sends, so the running sum
  ! of outputs differs from the exact running sum only by the residuals still
  ! held after the last step: about one step's s, 1.25 s allowed.
  do i = 1, count
    err = abs(sum_out(i) - sum_exact(i))
    tol(i) = 1.25d0 * step(i) + 1d-6
    if (.not. (err <= tol(i))) then
      if (ok == 1) write(error_unit, '(a,i0,a,i0,3(a,es12.5))') 'fortran_allreduce: rank ', rank, &
          ': element ', i, ' drifted: sum over steps ', sum_out(i), ', exact ', sum_exact(i), ', bound ', tol(i)
      ok = 0
    end if
    worst_sum = max(worst_sum, err / tol(i))
  end do

  call qc_error_buffer_norm(residuals, norm)
  if (.not. (ieee_is_finite(norm) .and. norm > 0)) then
    write(error_unit, '(a,i0,a,es12.5,a)') 'fortran_allreduce: rank ', rank, ': residual norm ', norm, &
        ' is not finite and positive'
    ok = 0
  end if

  call MPI_Allreduce(ok, all_ok, 1, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    write(*, '(a,i0,a,i0,a,i0,a,i0,a,f4.2,a,f4.2,a,es10.4)') 'fortran_allreduce: ', nranks, ' ranks, ', &
        steps, ' steps, ', count, ' values, minmax ', bits, ' bits + error feedback, SRA: worst error ', &
        worst, ' of the bound, running sum ', worst_sum, ', residual norm ', norm
    if (all_ok == 1) then
      write(*, '(a)') 'fortran_allreduce: OK'
    else
      write(*, '(a)') 'fortran_allreduce: FAILED'
    end if
  end if

  call qc_error_buffer_destroy(residuals)
  call qc_comm_destroy(comm)   ! before MPI_Finalize: it frees qc's MPI communicators
  call MPI_Finalize(ierr)
  if (all_ok /= 1) error stop 1

contains

  ! Rank r's gradient at step t, element i (0-based, as in the C example): a
  ! slow wave per rank, small in the first half (a "bias-like" layer), large
  ! in the second.
  pure function gradient(r, t, i) result(v)
    integer, intent(in) :: r, t, i
    real(c_float) :: v
    real(c_double) :: scale
    scale = merge(0.1d0, 1.0d0, i < count / 2)
    v = real(scale * sin(0.001d0 * (i + 1) * (r + 1) + 0.3d0 * t) + 0.02d0 * (r - t), c_float)
  end function gradient

end program fortran_allreduce
