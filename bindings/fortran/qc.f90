! qc.f90 - Fortran 2003 bindings of qc (quantized collectives), module `qc`.
!
! The module mirrors include/qc.h, the library's stable C ABI, through
! iso_c_binding; nothing here is compiled into libqc itself. Read it like a
! header: section numbers follow qc.h, and every C function has two faces.
!
!   1. The raw interface, named like the C function plus `_c`
!      (qc_allreduce_c binds to qc_allreduce). It takes exactly the C
!      arguments: type(c_ptr) for pointers, integer(c_size_t) for counts,
!      NUL-terminated strings. Use it for anything the friendly layer does
!      not cover (16-bit dtypes, device streams, memory you got from C).
!      These interfaces, the enum parameters and the bind(c) struct types
!      are GENERATED from qc.h by tools/gen_bindings.py into module
!      qc_c_api (qc_c_api.f90); this module re-exports all of it, so
!      `use qc` is all a program needs.
!   2. The friendly routine, named exactly like the C function
!      (qc_allreduce), written by hand in this file. It takes handles as
!      derived types (type(qc_comm), type(qc_error_buffer)), Fortran
!      strings, assumed-shape arrays whose size is the count, and reports
!      through an optional `ierr`:
!        - ierr present: it receives the status (QC_SUCCESS = 0, else the
!          failure); the call never stops the program. Read the detail
!          with qc_last_error_message().
!        - ierr absent: a failure prints the routine, the status name and
!          qc_last_error() to stderr and ends the program with `error stop`
!          (under mpirun a non-zero exit of one rank ends the job).
!      Every function of qc.h has a friendly routine (qc_last_error's is
!      qc_last_error_message); what they leave out (dtypes other than
!      float32, streams) stays with the raw face.
!
! Usage (MPI):
!   use mpi
!   use qc
!   type(qc_comm) :: comm
!   call MPI_Init(ierr)
!   call qc_comm_create_mpi(MPI_COMM_WORLD, comm)        ! mpi_f08: world%MPI_VAL
!   call qc_allreduce(comm, grad, avg, QC_OP_AVG, layer="fc1.weight")
!   call qc_comm_destroy(comm)                           ! before MPI_Finalize
!
! Kinds: buffers are real(c_float) (QC_DTYPE_FLOAT32); ranks, sizes, ierr and
! MPI handles are default integers, as in MPI's Fortran bindings. Counts of
! qc_error_buffer_create and qc_codec_encoded_size, and the segment counts of
! qc_allreduce_segments, accept 32- or 64-bit integers.
! Strings (layer names, patterns) lose trailing blanks before they go to C,
! as MPI does with its string arguments.
!
! Indices: ranks are 0-based, as in MPI and C. Everything that is a position
! in a Fortran array is 1-based: column i of the emulation arrays is rank
! i-1, and qc_comm_layer_name numbers the layers 1..qc_comm_layer_count
! (C's index is the Fortran one minus 1).
!
! The .mod file this produces is specific to the compiler (and its version)
! that built it; build qc_fortran with the compiler of the program using it.
module qc
  use qc_c_api
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit, int32, int64
  implicit none
  private

  ! Everything generated from qc.h (tools/gen_bindings.py): version and
  ! enum parameters (QC_SUCCESS, QC_CODEC_MINMAX, ...), the bind(c) struct
  ! types (qc_policy_t, qc_comm_config_t, qc_stats_t, qc_layer_stats_t,
  ! qc_adapt_config_t, qc_adapt_report_t) and the raw interfaces
  ! (qc_allreduce_c binds to qc_allreduce), re-exported from here.
  ! Component defaults are those of the C initializer macros, so a plain
  ! declaration is ready to use. struct_size starts at 0 because Fortran
  ! cannot take c_sizeof of a type inside its own definition: the friendly
  ! routines set it to c_sizeof(x) whenever it is 0. Only code that hands one
  ! of these to a raw *_c interface must set struct_size itself
  ! (`p%struct_size = c_sizeof(p)`), or call the init routine first.
  include "qc_c_api_public.inc"

  ! Opaque handles (qc_comm_t, qc_error_buffer_t). A derived type rather
  ! than a bare c_ptr so that the compiler keeps a communicator from being
  ! passed where an error buffer is expected. A default-initialized value
  ! (e.g. `qc_comm()`) is the C NULL handle: qc_error_buffer_create takes it
  ! for an emulation buffer, and destroying it does nothing.
  type, public :: qc_comm
    type(c_ptr) :: ptr = c_null_ptr
  end type qc_comm

  type, public :: qc_error_buffer
    type(c_ptr) :: ptr = c_null_ptr
  end type qc_error_buffer


  ! strlen from the C library, to turn a returned `const char*` into a
  ! Fortran string.
  interface
    function c_strlen(s) bind(c, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: n
    end function
  end interface

  ! ======================================================================
  ! Friendly routines
  ! ======================================================================
  public :: qc_version_number, qc_version_string, qc_status_string, qc_last_error_message
  public :: qc_policy_init, qc_comm_config_init
  public :: qc_comm_create, qc_comm_create_mpi, qc_comm_create_local, qc_comm_create_local_with_config
  public :: qc_comm_destroy, qc_comm_rank, qc_comm_size, qc_comm_get_async_error, qc_comm_get_stats
  public :: qc_comm_get_layer_stats, qc_comm_layer_count, qc_comm_layer_name
  public :: qc_comm_save_state, qc_comm_load_state
  public :: qc_comm_set_layer_policy, qc_comm_get_layer_policy, qc_comm_apply_preset, qc_comm_adapt_policies
  public :: qc_allreduce, qc_allreduce_inplace, qc_allreduce_segments, qc_allreduce_segments_inplace
  public :: qc_alltoall
  public :: qc_error_buffer_create, qc_error_buffer_destroy, qc_error_buffer_reset
  public :: qc_error_buffer_norm, qc_error_buffer_save, qc_error_buffer_load
  public :: qc_codec_encoded_size, qc_codec_encode, qc_codec_decode
  public :: qc_emulate_allreduce, qc_emulate_alltoall

  ! Counts come as 32- or 64-bit integers (size(x) is a default integer;
  ! tensors of 2**31 elements or more need size(x, kind=int64)). Explicit
  ! kinds rather than "default integer" keep the two specifics distinct
  ! under -fdefault-integer-8 as well.
  interface qc_error_buffer_create
    module procedure qc_error_buffer_create_i32, qc_error_buffer_create_i64
  end interface
  interface qc_codec_encoded_size
    module procedure qc_codec_encoded_size_i32, qc_codec_encoded_size_i64
  end interface
  interface qc_allreduce_segments
    module procedure qc_allreduce_segments_i32, qc_allreduce_segments_i64
  end interface
  interface qc_allreduce_segments_inplace
    module procedure qc_allreduce_segments_inplace_i32, qc_allreduce_segments_inplace_i64
  end interface

  ! A failure that the Fortran layer detects before calling C (e.g. send
  ! and receive arrays of different sizes) has no qc_last_error(); its
  ! message is kept here. Per thread when compiled with OpenMP, like
  ! qc_last_error(). Empty once a later call fails inside C.
  character(len=512), save :: fortran_error = ''
  !$omp threadprivate(fortran_error)

contains

  ! ----------------------------------------------------------------------
  ! Private helpers
  ! ----------------------------------------------------------------------

  ! A C string (NULL allowed) as a Fortran string.
  function from_c_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = c_strlen(p)
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function from_c_string

  ! A Fortran string, trailing blanks removed, as a NUL-terminated array
  ! for C. The caller declares `buf` as `allocatable, target` and passes
  ! c_loc(buf); it lives until the caller returns, longer than the C call.
  subroutine to_c_string(s, buf)
    character(len=*), intent(in) :: s
    character(kind=c_char), allocatable, intent(out) :: buf(:)
    integer :: i, n
    n = len_trim(s)
    allocate(buf(n + 1))
    do i = 1, n
      buf(i) = s(i:i)
    end do
    buf(n + 1) = c_null_char
  end subroutine to_c_string

  ! An optional name argument as C wants it: NULL when absent, else the
  ! address of its NUL-terminated copy in buf. buf belongs to the caller
  ! (allocatable, target), so the address stays valid until the caller's
  ! C call returns.
  function optional_c_string(s, buf) result(p)
    character(len=*), intent(in), optional :: s
    character(kind=c_char), allocatable, target, intent(inout) :: buf(:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (present(s)) then
      call to_c_string(s, buf)
      p = c_loc(buf)
    end if
  end function optional_c_string

  ! Report a status the way the module promises: into ierr when present,
  ! otherwise print and stop on failure. A status that came from C clears
  ! the Fortran-side message, so qc_last_error_message() names the latest.
  subroutine finish(status, where, ierr, from_fortran)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: where
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: from_fortran
    character(len=:), allocatable :: detail
    if (status /= QC_SUCCESS) then
      if (.not. present(from_fortran)) fortran_error = ''
    end if
    if (present(ierr)) then
      ierr = int(status)
      return
    end if
    if (status == QC_SUCCESS) return
    ! Read the message before any other qc call replaces it.
    detail = qc_last_error_message()
    write(error_unit, '(a)') where // ' failed: ' // qc_status_string(status) // ': ' // detail
    flush(error_unit)
    error stop 1
  end subroutine finish

  ! A failure found by the Fortran layer itself: no C call was made.
  subroutine fail_here(where, message, ierr)
    character(len=*), intent(in) :: where, message
    integer, intent(out), optional :: ierr
    fortran_error = where // ': ' // message
    call finish(QC_ERROR_INVALID_ARGUMENT, where, ierr, from_fortran=.true.)
  end subroutine fail_here

  ! struct_size 0 means "not set yet": fill in this module's layout.
  function sized_policy(policy) result(p)
    type(qc_policy_t), intent(in) :: policy
    type(qc_policy_t) :: p
    p = policy
    if (p%struct_size == 0) p%struct_size = c_sizeof(p)
  end function sized_policy

  function sized_config(config) result(c)
    type(qc_comm_config_t), intent(in) :: config
    type(qc_comm_config_t) :: c
    c = config
    if (c%struct_size == 0) c%struct_size = c_sizeof(c)
  end function sized_config

  function sized_adapt_config(config) result(c)
    type(qc_adapt_config_t), intent(in) :: config
    type(qc_adapt_config_t) :: c
    c = config
    if (c%struct_size == 0) c%struct_size = c_sizeof(c)
  end function sized_adapt_config

  ! c_loc of an empty array is not defined; C accepts NULL when count is 0.
  function buf_ptr(x) result(p)
    real(c_float), contiguous, intent(in), target :: x(:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(x) > 0) p = c_loc(x)
  end function buf_ptr

  function bytes_ptr(x) result(p)
    integer(c_int8_t), contiguous, intent(in), target :: x(:)
    type(c_ptr) :: p
    p = c_null_ptr
    if (size(x) > 0) p = c_loc(x)
  end function bytes_ptr

  ! ----------------------------------------------------------------------
  ! 1. Versions, statuses and errors
  ! ----------------------------------------------------------------------

  !> Version of the running library, M*10000 + m*100 + p.
  function qc_version_number() result(v)
    integer :: v
    v = int(qc_version_number_c())
  end function qc_version_number

  !> "M.m.p" of the running library.
  function qc_version_string() result(s)
    character(len=:), allocatable :: s
    s = from_c_string(qc_version_string_c())
  end function qc_version_string

  !> Name of a status, e.g. "QC_ERROR_TIMEOUT".
  function qc_status_string(status) result(s)
    integer, intent(in) :: status
    character(len=:), allocatable :: s
    s = from_c_string(qc_status_string_c(int(status, c_int)))
  end function qc_status_string

  !> The calling thread's message for its most recent failed qc call ("" if
  !> none): the Fortran layer's own message when it rejected the arguments
  !> itself, otherwise qc_last_error().
  function qc_last_error_message() result(s)
    character(len=:), allocatable :: s
    if (len_trim(fortran_error) > 0) then
      s = trim(fortran_error)
    else
      s = from_c_string(qc_last_error_c())
    end if
  end function qc_last_error_message

  ! ----------------------------------------------------------------------
  ! 3.-4. Struct initialization
  ! ----------------------------------------------------------------------

  !> Fill policy with the library's defaults for this layout (qc_policy_init_sized).
  subroutine qc_policy_init(policy, ierr)
    type(qc_policy_t), intent(out) :: policy
    integer, intent(out), optional :: ierr
    call finish(qc_policy_init_sized_c(policy, c_sizeof(policy)), 'qc_policy_init', ierr)
  end subroutine qc_policy_init

  !> Fill config with the library's defaults for this layout (qc_comm_config_init_sized).
  subroutine qc_comm_config_init(config, ierr)
    type(qc_comm_config_t), intent(out) :: config
    integer, intent(out), optional :: ierr
    call finish(qc_comm_config_init_sized_c(config, c_sizeof(config)), 'qc_comm_config_init', ierr)
  end subroutine qc_comm_config_init

  ! ----------------------------------------------------------------------
  ! 4. Communicators
  ! ----------------------------------------------------------------------

  !> Create a communicator from a config (MPI or NCCL transport).
  subroutine qc_comm_create(config, comm, ierr)
    type(qc_comm_config_t), intent(in) :: config
    type(qc_comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call finish(qc_comm_create_c(sized_config(config), comm%ptr), 'qc_comm_create', ierr)
  end subroutine qc_comm_create

  !> Create a communicator over an MPI communicator: collective over fcomm,
  !> which qc duplicates (fcomm stays the caller's). fcomm is the Fortran
  !> handle: MPI_COMM_WORLD of `use mpi`, or comm%MPI_VAL with mpi_f08.
  !> MPI must be initialized. timeout (seconds a blocked collective waits
  !> for its peers) defaults to 300.
  subroutine qc_comm_create_mpi(fcomm, comm, timeout, ierr)
    integer, intent(in) :: fcomm
    type(qc_comm), intent(out) :: comm
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    type(qc_comm_config_t) :: config
    config%struct_size = c_sizeof(config)
    config%transport = QC_TRANSPORT_MPI
    config%mpi_comm = int(fcomm, c_int64_t)
    if (present(timeout)) config%timeout_seconds = timeout
    call finish(qc_comm_create_c(config, comm%ptr), 'qc_comm_create_mpi', ierr)
  end subroutine qc_comm_create_mpi

  !> An in-process group of size(comms) ranks (threads of this process).
  subroutine qc_comm_create_local(comms, ierr)
    type(qc_comm), intent(out) :: comms(:)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: ptrs(size(comms))
    integer(c_int) :: st
    st = qc_comm_create_local_c(int(size(comms), c_int), ptrs)
    if (st == QC_SUCCESS) comms(:)%ptr = ptrs
    call finish(st, 'qc_comm_create_local', ierr)
  end subroutine qc_comm_create_local

  !> As qc_comm_create_local, with config%timeout_seconds for the group.
  subroutine qc_comm_create_local_with_config(comms, config, ierr)
    type(qc_comm), intent(out) :: comms(:)
    type(qc_comm_config_t), intent(in) :: config
    integer, intent(out), optional :: ierr
    type(qc_comm_config_t), target :: c
    type(c_ptr) :: ptrs(size(comms))
    integer(c_int) :: st
    c = sized_config(config)
    st = qc_comm_create_local_with_config_c(int(size(comms), c_int), c_loc(c), ptrs)
    if (st == QC_SUCCESS) comms(:)%ptr = ptrs
    call finish(st, 'qc_comm_create_local_with_config', ierr)
  end subroutine qc_comm_create_local_with_config

  !> Release a communicator (local: never waits) and reset the handle to
  !> NULL. An MPI communicator must be destroyed before MPI_Finalize.
  subroutine qc_comm_destroy(comm, ierr)
    type(qc_comm), intent(inout) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = qc_comm_destroy_c(comm%ptr)
    comm%ptr = c_null_ptr
    call finish(st, 'qc_comm_destroy', ierr)
  end subroutine qc_comm_destroy

  !> This rank's number, 0-based as in MPI.
  subroutine qc_comm_rank(comm, rank, ierr)
    type(qc_comm), intent(in) :: comm
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    r = -1
    call finish(qc_comm_rank_c(comm%ptr, r), 'qc_comm_rank', ierr)
    rank = int(r)
  end subroutine qc_comm_rank

  subroutine qc_comm_size(comm, size, ierr)
    type(qc_comm), intent(in) :: comm
    integer, intent(out) :: size
    integer, intent(out), optional :: ierr
    integer(c_int) :: n
    n = 0
    call finish(qc_comm_size_c(comm%ptr, n), 'qc_comm_size', ierr)
    size = int(n)
  end subroutine qc_comm_size

  !> The failure that broke the communicator's group (QC_SUCCESS while it is
  !> healthy); qc_last_error_message() then describes it. ierr is about the
  !> query itself.
  subroutine qc_comm_get_async_error(comm, async_error, ierr)
    type(qc_comm), intent(in) :: comm
    integer, intent(out) :: async_error
    integer, intent(out), optional :: ierr
    integer(c_int) :: e
    e = QC_SUCCESS
    call finish(qc_comm_get_async_error_c(comm%ptr, e), 'qc_comm_get_async_error', ierr)
    async_error = int(e)
  end subroutine qc_comm_get_async_error

  !> Counters since the communicator was created (sets struct_size).
  subroutine qc_comm_get_stats(comm, stats, ierr)
    type(qc_comm), intent(in) :: comm
    type(qc_stats_t), intent(out) :: stats
    integer, intent(out), optional :: ierr
    stats%struct_size = c_sizeof(stats)
    call finish(qc_comm_get_stats_c(comm%ptr, stats), 'qc_comm_get_stats', ierr)
  end subroutine qc_comm_get_stats

  !> Counters of one layer name (layer absent: "*", the name of calls made
  !> without a layer), for this rank (sets struct_size). A name no call has
  !> used yet gives all zeros (calls == 0). A fused call
  !> (qc_allreduce_segments) counts once for each of its segments.
  subroutine qc_comm_get_layer_stats(comm, layer, stats, ierr)
    type(qc_comm), intent(in) :: comm
    character(len=*), intent(in), optional :: layer
    type(qc_layer_stats_t), intent(out) :: stats
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player
    player = optional_c_string(layer, clayer)
    stats%struct_size = c_sizeof(stats)
    call finish(qc_comm_get_layer_stats_c(comm%ptr, player, stats), 'qc_comm_get_layer_stats', ierr)
  end subroutine qc_comm_get_layer_stats

  !> How many layer names this rank's collectives have used so far ("*"
  !> included when a call had no layer).
  subroutine qc_comm_layer_count(comm, count, ierr)
    type(qc_comm), intent(in) :: comm
    integer, intent(out) :: count
    integer, intent(out), optional :: ierr
    integer(c_size_t) :: n
    n = 0
    call finish(qc_comm_layer_count_c(comm%ptr, n), 'qc_comm_layer_count', ierr)
    count = int(n)
  end subroutine qc_comm_layer_count

  !> The name of layer `index`, 1-BASED: 1 <= index <= qc_comm_layer_count
  !> (C's qc_comm_layer_name takes index - 1). Layers are in byte order of
  !> their names. name is allocated here to the name's exact length ('' on
  !> failure); an index out of range gives QC_ERROR_INVALID_ARGUMENT.
  !>   do i = 1, nlayers
  !>     call qc_comm_layer_name(comm, i, name)
  subroutine qc_comm_layer_name(comm, index, name, ierr)
    type(qc_comm), intent(in) :: comm
    integer, intent(in) :: index
    character(len=:), allocatable, intent(out) :: name
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: buf(:)
    integer(c_size_t) :: length, written
    integer(c_int) :: st
    integer :: i
    name = ''
    if (index < 1) then
      call fail_here('qc_comm_layer_name', 'index must be >= 1 (Fortran numbers the layers &
                     &1..qc_comm_layer_count; C index = Fortran index - 1)', ierr)
      return
    end if
    length = 0
    st = qc_comm_layer_name_c(comm%ptr, int(index - 1, c_size_t), c_null_ptr, 0_c_size_t, length)
    if (st == QC_SUCCESS) then
      allocate(buf(length + 1))
      written = 0
      st = qc_comm_layer_name_c(comm%ptr, int(index - 1, c_size_t), c_loc(buf), &
                                length + 1, written)
    end if
    if (st == QC_SUCCESS) then
      deallocate(name)
      allocate(character(len=written) :: name)
      do i = 1, int(written)
        name(i:i) = buf(i)
      end do
    end if
    call finish(st, 'qc_comm_layer_name', ierr)
  end subroutine qc_comm_layer_name

  !> Every layer's call count (which keys its stochastic rounding) as an
  !> image for a checkpoint; qc_comm_load_state on every rank resumes it.
  subroutine qc_comm_save_state(comm, image, ierr)
    type(qc_comm), intent(in) :: comm
    integer(c_int8_t), allocatable, target, intent(out) :: image(:)
    integer, intent(out), optional :: ierr
    integer(c_size_t) :: needed, written
    integer(c_int) :: st
    needed = 0
    st = qc_comm_save_state_c(comm%ptr, c_null_ptr, 0_c_size_t, needed)
    if (st == QC_SUCCESS) then
      allocate(image(needed))
      st = qc_comm_save_state_c(comm%ptr, bytes_ptr(image), needed, written)
    end if
    call finish(st, 'qc_comm_save_state', ierr)
  end subroutine qc_comm_save_state

  !> Restore the layer call counts of an image of qc_comm_save_state.
  subroutine qc_comm_load_state(comm, image, ierr)
    type(qc_comm), intent(in) :: comm
    integer(c_int8_t), contiguous, intent(in), target :: image(:)
    integer, intent(out), optional :: ierr
    call finish(qc_comm_load_state_c(comm%ptr, bytes_ptr(image), size(image, kind=c_size_t)), &
                'qc_comm_load_state', ierr)
  end subroutine qc_comm_load_state

  !> Policy for layers whose name matches pattern (exact, or a glob with
  !> * and ?; "*" is the default). Every rank must set the same policies.
  subroutine qc_comm_set_layer_policy(comm, pattern, policy, ierr)
    type(qc_comm), intent(in) :: comm
    character(len=*), intent(in) :: pattern
    type(qc_policy_t), intent(in) :: policy
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: cpattern(:)
    call to_c_string(pattern, cpattern)
    call finish(qc_comm_set_layer_policy_c(comm%ptr, c_loc(cpattern), sized_policy(policy)), &
                'qc_comm_set_layer_policy', ierr)
  end subroutine qc_comm_set_layer_policy

  !> The policy that layer resolves to (layer absent: the "*" policy).
  subroutine qc_comm_get_layer_policy(comm, layer, policy, ierr)
    type(qc_comm), intent(in) :: comm
    character(len=*), intent(in), optional :: layer
    type(qc_policy_t), intent(out) :: policy
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player
    player = optional_c_string(layer, clayer)
    policy%struct_size = c_sizeof(policy)
    call finish(qc_comm_get_layer_policy_c(comm%ptr, player, policy), 'qc_comm_get_layer_policy', ierr)
  end subroutine qc_comm_get_layer_policy

  !> A named preset: a fixed list of qc_comm_set_layer_policy calls that qc.h
  !> spells out ("cgx": biases and norms in full precision, "*" = base with
  !> messages under 16 KiB uncompressed). base absent: the current "*" policy.
  subroutine qc_comm_apply_preset(comm, name, base, ierr)
    type(qc_comm), intent(in) :: comm
    character(len=*), intent(in) :: name
    type(qc_policy_t), intent(in), optional :: base
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: cname(:)
    type(qc_policy_t), target :: b
    type(c_ptr) :: pbase
    call to_c_string(name, cname)
    pbase = c_null_ptr
    if (present(base)) then
      b = sized_policy(base)
      pbase = c_loc(b)
    end if
    call finish(qc_comm_apply_preset_c(comm%ptr, c_loc(cname), pbase), 'qc_comm_apply_preset', ierr)
  end subroutine qc_comm_apply_preset

  !> Adaptive bit widths (paper 003 §5): from the per-layer statistics of
  !> this communicator, give every layer whose policy uses codec minmax or
  !> qsgd a width from config%allowed_bits, applied with qc_comm_set_layer_policy
  !> under the layer's exact name (read it back with qc_comm_get_layer_policy).
  !> Collective: every rank calls it after the same collectives.
  !> config absent: qc_adapt_config_t() (the defaults of QC_ADAPT_CONFIG_INIT:
  !> kmeans, alpha 2, widths 2, 3, 4, 8). report, if present, receives the
  !> layers given a width and the predicted error and bytes (sets
  !> struct_size; on failure it holds zeros).
  subroutine qc_comm_adapt_policies(comm, config, report, ierr)
    type(qc_comm), intent(in) :: comm
    type(qc_adapt_config_t), intent(in), optional :: config
    type(qc_adapt_report_t), intent(out), optional :: report
    integer, intent(out), optional :: ierr
    type(qc_adapt_config_t) :: c
    type(qc_adapt_report_t), target :: r
    type(c_ptr) :: preport
    integer(c_int) :: st
    if (present(config)) then
      c = sized_adapt_config(config)
    else
      c = sized_adapt_config(qc_adapt_config_t())
    end if
    r%struct_size = c_sizeof(r)
    preport = c_null_ptr
    if (present(report)) preport = c_loc(r)
    st = qc_comm_adapt_policies_c(comm%ptr, c, preport)
    if (present(report)) then
      if (st /= QC_SUCCESS) then
        r = qc_adapt_report_t()
        r%struct_size = c_sizeof(r)
      end if
      report = r
    end if
    call finish(st, 'qc_comm_adapt_policies', ierr)
  end subroutine qc_comm_adapt_policies

  ! ----------------------------------------------------------------------
  ! 5. Collectives
  ! ----------------------------------------------------------------------

  !> Reduce sendbuf over all ranks into recvbuf (same size; count is
  !> size(sendbuf)); every rank gets the same bits. op: QC_OP_SUM or
  !> QC_OP_AVG. layer: the name whose policy applies (absent: "*").
  !> error_buffer: residuals for error feedback, used when the policy has
  !> error_feedback set. For in-place use qc_allreduce_inplace: Fortran
  !> forbids passing one array as both arguments.
  subroutine qc_allreduce(comm, sendbuf, recvbuf, op, layer, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(in), target :: sendbuf(:)
    real(c_float), contiguous, intent(inout), target :: recvbuf(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layer
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player, peb
    if (size(recvbuf) /= size(sendbuf)) then
      call fail_here('qc_allreduce', 'recvbuf has a different size than sendbuf', ierr)
      return
    end if
    player = optional_c_string(layer, clayer)
    peb = c_null_ptr
    if (present(error_buffer)) peb = error_buffer%ptr
    call finish(qc_allreduce_c(comm%ptr, buf_ptr(sendbuf), buf_ptr(recvbuf), &
                               size(sendbuf, kind=c_size_t), QC_DTYPE_FLOAT32, &
                               int(op, c_int), player, peb, c_null_ptr), &
                'qc_allreduce', ierr)
  end subroutine qc_allreduce

  !> qc_allreduce with the result written over buf.
  subroutine qc_allreduce_inplace(comm, buf, op, layer, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(inout), target :: buf(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layer
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player, peb
    player = optional_c_string(layer, clayer)
    peb = c_null_ptr
    if (present(error_buffer)) peb = error_buffer%ptr
    call finish(qc_allreduce_c(comm%ptr, buf_ptr(buf), buf_ptr(buf), size(buf, kind=c_size_t), &
                               QC_DTYPE_FLOAT32, int(op, c_int), player, peb, c_null_ptr), &
                'qc_allreduce_inplace', ierr)
  end subroutine qc_allreduce_inplace

  !> One allreduce over a fused buffer of several layers (a DDP bucket):
  !> segment i is counts(i) elements of layer layers(i), back to back in
  !> sendbuf and recvbuf, so sum(counts) must equal size(sendbuf) (and
  !> size(recvbuf)); else QC_ERROR_INVALID_ARGUMENT before any C call.
  !> counts: integers of kind int32 or int64 (default integer works),
  !> each >= 0. layers (absent: every segment is "*"): one name per segment,
  !> size(layers) == size(counts), each with its trailing blanks removed.
  !> op: QC_OP_SUM or QC_OP_AVG. Each segment keeps its own policy, and its
  !> per-layer statistics count the call once. error_buffer covers the whole
  !> buffer (sum(counts) residuals). Every rank passes the same counts and
  !> layers. In place: qc_allreduce_segments_inplace.
  !> Note the order: op comes before the optional layers (as in
  !> qc_allreduce), not after them as in C.
  subroutine qc_allreduce_segments_i64(comm, sendbuf, recvbuf, counts, op, layers, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(in), target :: sendbuf(:)
    real(c_float), contiguous, intent(inout), target :: recvbuf(:)
    integer(int64), intent(in) :: counts(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layers(:)
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    if (size(recvbuf) /= size(sendbuf)) then
      call fail_here('qc_allreduce_segments', 'recvbuf has a different size than sendbuf', ierr)
      return
    end if
    call segments_call('qc_allreduce_segments', comm, buf_ptr(sendbuf), buf_ptr(recvbuf), &
                       size(sendbuf, kind=int64), counts, op, layers, error_buffer, ierr)
  end subroutine qc_allreduce_segments_i64

  subroutine qc_allreduce_segments_i32(comm, sendbuf, recvbuf, counts, op, layers, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(in), target :: sendbuf(:)
    real(c_float), contiguous, intent(inout), target :: recvbuf(:)
    integer(int32), intent(in) :: counts(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layers(:)
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    call qc_allreduce_segments_i64(comm, sendbuf, recvbuf, int(counts, int64), op, layers, &
                                   error_buffer, ierr)
  end subroutine qc_allreduce_segments_i32

  !> qc_allreduce_segments with the result written over buf.
  subroutine qc_allreduce_segments_inplace_i64(comm, buf, counts, op, layers, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(inout), target :: buf(:)
    integer(int64), intent(in) :: counts(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layers(:)
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    call segments_call('qc_allreduce_segments_inplace', comm, buf_ptr(buf), buf_ptr(buf), &
                       size(buf, kind=int64), counts, op, layers, error_buffer, ierr)
  end subroutine qc_allreduce_segments_inplace_i64

  subroutine qc_allreduce_segments_inplace_i32(comm, buf, counts, op, layers, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(inout), target :: buf(:)
    integer(int32), intent(in) :: counts(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layers(:)
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    call qc_allreduce_segments_inplace_i64(comm, buf, int(counts, int64), op, layers, &
                                           error_buffer, ierr)
  end subroutine qc_allreduce_segments_inplace_i32

  ! The checks and the C call shared by the two segment routines. The
  ! NUL-terminated names live in `names` (one array, each name followed by
  ! its NUL) and `lptr` holds a pointer to the start of each; both are
  ! locals of this routine, so they outlive the C call.
  subroutine segments_call(where, comm, psend, precv, total, counts, op, layers, error_buffer, ierr)
    character(len=*), intent(in) :: where
    type(qc_comm), intent(in) :: comm
    type(c_ptr), intent(in) :: psend, precv
    integer(int64), intent(in) :: total
    integer(int64), intent(in) :: counts(:)
    integer, intent(in) :: op
    character(len=*), intent(in), optional :: layers(:)
    type(qc_error_buffer), intent(in), optional :: error_buffer
    integer, intent(out), optional :: ierr
    integer(c_size_t) :: ccounts(size(counts))
    type(c_ptr), target :: lptr(size(counts))
    character(kind=c_char), allocatable, target :: names(:)
    character(len=40) :: got, want
    type(c_ptr) :: players, peb
    integer :: i, j, k, nseg
    nseg = size(counts)
    if (any(counts < 0)) then
      call fail_here(where, 'counts has a negative entry', ierr)
      return
    end if
    if (sum(counts) /= total) then
      write(got, '(i0)') sum(counts)
      write(want, '(i0)') total
      call fail_here(where, 'sum(counts) is ' // trim(got) // ' but the buffer has ' // &
                     trim(want) // ' elements', ierr)
      return
    end if
    ccounts = int(counts, c_size_t)
    players = c_null_ptr
    if (present(layers)) then
      if (size(layers) /= nseg) then
        call fail_here(where, 'layers needs one name per segment (size(layers) /= size(counts))', ierr)
        return
      end if
      allocate(names(sum(len_trim(layers)) + nseg))
      k = 1
      do i = 1, nseg
        lptr(i) = c_loc(names(k))
        do j = 1, len_trim(layers(i))
          names(k) = layers(i)(j:j)
          k = k + 1
        end do
        names(k) = c_null_char
        k = k + 1
      end do
      if (nseg > 0) players = c_loc(lptr)
    end if
    peb = c_null_ptr
    if (present(error_buffer)) peb = error_buffer%ptr
    call finish(qc_allreduce_segments_c(comm%ptr, psend, precv, int(nseg, c_size_t), ccounts, &
                                        players, QC_DTYPE_FLOAT32, int(op, c_int), peb, c_null_ptr), &
                where, ierr)
  end subroutine segments_call

  !> Every rank sends block j of sendbuf to rank j and receives rank i's
  !> block into block i of recvbuf. size(sendbuf) must be a multiple of
  !> the communicator size; the block size is size(sendbuf) / nranks.
  subroutine qc_alltoall(comm, sendbuf, recvbuf, layer, ierr)
    type(qc_comm), intent(in) :: comm
    real(c_float), contiguous, intent(in), target :: sendbuf(:)
    real(c_float), contiguous, intent(inout), target :: recvbuf(:)
    character(len=*), intent(in), optional :: layer
    integer, intent(out), optional :: ierr
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player
    integer(c_int) :: n, st
    if (size(recvbuf) /= size(sendbuf)) then
      call fail_here('qc_alltoall', 'recvbuf has a different size than sendbuf', ierr)
      return
    end if
    n = 0
    st = qc_comm_size_c(comm%ptr, n)
    if (st /= QC_SUCCESS) then
      call finish(st, 'qc_alltoall', ierr)
      return
    end if
    if (mod(size(sendbuf), int(n)) /= 0) then
      call fail_here('qc_alltoall', 'size(sendbuf) is not a multiple of the communicator size', ierr)
      return
    end if
    player = optional_c_string(layer, clayer)
    call finish(qc_alltoall_c(comm%ptr, buf_ptr(sendbuf), buf_ptr(recvbuf), &
                              size(sendbuf, kind=c_size_t) / int(n, c_size_t), &
                              QC_DTYPE_FLOAT32, player, c_null_ptr), &
                'qc_alltoall', ierr)
  end subroutine qc_alltoall

  ! ----------------------------------------------------------------------
  ! 6. Error buffers
  ! ----------------------------------------------------------------------

  !> Residuals for error feedback on one tensor of count elements, all zero.
  !> comm: the communicator whose rank and size it belongs to, or qc_comm()
  !> (NULL) for a buffer used with qc_emulate_allreduce.
  subroutine qc_error_buffer_create_i32(comm, count, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    integer(int32), intent(in) :: count
    type(qc_error_buffer), intent(out) :: error_buffer
    integer, intent(out), optional :: ierr
    call qc_error_buffer_create_i64(comm, int(count, int64), error_buffer, ierr)
  end subroutine qc_error_buffer_create_i32

  subroutine qc_error_buffer_create_i64(comm, count, error_buffer, ierr)
    type(qc_comm), intent(in) :: comm
    integer(int64), intent(in) :: count
    type(qc_error_buffer), intent(out) :: error_buffer
    integer, intent(out), optional :: ierr
    if (count < 0) then
      call fail_here('qc_error_buffer_create', 'count is negative', ierr)
      return
    end if
    call finish(qc_error_buffer_create_c(comm%ptr, int(count, c_size_t), error_buffer%ptr), &
                'qc_error_buffer_create', ierr)
  end subroutine qc_error_buffer_create_i64

  !> Release an error buffer and reset the handle to NULL.
  subroutine qc_error_buffer_destroy(error_buffer, ierr)
    type(qc_error_buffer), intent(inout) :: error_buffer
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = qc_error_buffer_destroy_c(error_buffer%ptr)
    error_buffer%ptr = c_null_ptr
    call finish(st, 'qc_error_buffer_destroy', ierr)
  end subroutine qc_error_buffer_destroy

  subroutine qc_error_buffer_reset(error_buffer, ierr)
    type(qc_error_buffer), intent(in) :: error_buffer
    integer, intent(out), optional :: ierr
    call finish(qc_error_buffer_reset_c(error_buffer%ptr), 'qc_error_buffer_reset', ierr)
  end subroutine qc_error_buffer_reset

  !> L2 norm of the residuals (computed in double).
  subroutine qc_error_buffer_norm(error_buffer, l2_norm, ierr)
    type(qc_error_buffer), intent(in) :: error_buffer
    real(c_double), intent(out) :: l2_norm
    integer, intent(out), optional :: ierr
    l2_norm = 0
    call finish(qc_error_buffer_norm_c(error_buffer%ptr, l2_norm), 'qc_error_buffer_norm', ierr)
  end subroutine qc_error_buffer_norm

  !> The residuals as a checkpoint image (allocated here to the exact size).
  subroutine qc_error_buffer_save(error_buffer, image, ierr)
    type(qc_error_buffer), intent(in) :: error_buffer
    integer(c_int8_t), allocatable, target, intent(out) :: image(:)
    integer, intent(out), optional :: ierr
    integer(c_size_t) :: needed, written
    integer(c_int) :: st
    needed = 0
    st = qc_error_buffer_save_c(error_buffer%ptr, c_null_ptr, 0_c_size_t, needed)
    if (st == QC_SUCCESS) then
      allocate(image(needed))
      st = qc_error_buffer_save_c(error_buffer%ptr, bytes_ptr(image), needed, written)
    end if
    call finish(st, 'qc_error_buffer_save', ierr)
  end subroutine qc_error_buffer_save

  !> Restore residuals from an image of qc_error_buffer_save.
  subroutine qc_error_buffer_load(error_buffer, image, ierr)
    type(qc_error_buffer), intent(in) :: error_buffer
    integer(c_int8_t), contiguous, intent(in), target :: image(:)
    integer, intent(out), optional :: ierr
    call finish(qc_error_buffer_load_c(error_buffer%ptr, bytes_ptr(image), size(image, kind=c_size_t)), &
                'qc_error_buffer_load', ierr)
  end subroutine qc_error_buffer_load

  ! ----------------------------------------------------------------------
  ! 7. Codecs on their own
  ! ----------------------------------------------------------------------

  !> Upper bound on the bytes qc_codec_encode writes for count elements.
  subroutine qc_codec_encoded_size_i32(policy, count, max_bytes, ierr)
    type(qc_policy_t), intent(in) :: policy
    integer(int32), intent(in) :: count
    integer(int64), intent(out) :: max_bytes
    integer, intent(out), optional :: ierr
    call qc_codec_encoded_size_i64(policy, int(count, int64), max_bytes, ierr)
  end subroutine qc_codec_encoded_size_i32

  subroutine qc_codec_encoded_size_i64(policy, count, max_bytes, ierr)
    type(qc_policy_t), intent(in) :: policy
    integer(int64), intent(in) :: count
    integer(int64), intent(out) :: max_bytes
    integer, intent(out), optional :: ierr
    integer(c_size_t) :: n
    max_bytes = 0
    if (count < 0) then
      call fail_here('qc_codec_encoded_size', 'count is negative', ierr)
      return
    end if
    n = 0
    call finish(qc_codec_encoded_size_c(sized_policy(policy), int(count, c_size_t), n), 'qc_codec_encoded_size', ierr)
    max_bytes = int(n, int64)
  end subroutine qc_codec_encoded_size_i64

  !> Encode src with the policy's codec into message, a self-describing
  !> byte image allocated here to the bytes written.
  subroutine qc_codec_encode(policy, src, message, ierr)
    type(qc_policy_t), intent(in) :: policy
    real(c_float), contiguous, intent(in), target :: src(:)
    integer(c_int8_t), allocatable, intent(out) :: message(:)
    integer, intent(out), optional :: ierr
    integer(c_int8_t), allocatable, target :: work(:)
    type(qc_policy_t) :: p
    integer(c_size_t) :: capacity, written
    integer(c_int) :: st
    p = sized_policy(policy)
    capacity = 0
    written = 0
    st = qc_codec_encoded_size_c(p, size(src, kind=c_size_t), capacity)
    if (st == QC_SUCCESS) then
      allocate(work(capacity))
      st = qc_codec_encode_c(p, buf_ptr(src), size(src, kind=c_size_t), QC_DTYPE_FLOAT32, &
                       bytes_ptr(work), capacity, written)
    end if
    if (st == QC_SUCCESS) then
      message = work(1:written)
    else
      allocate(message(0))
    end if
    call finish(st, 'qc_codec_encode', ierr)
  end subroutine qc_codec_encode

  !> Decode a message of qc_codec_encode into dst; size(dst) must be the
  !> message's element count (else QC_ERROR_MISMATCH).
  subroutine qc_codec_decode(message, dst, ierr)
    integer(c_int8_t), contiguous, intent(in), target :: message(:)
    real(c_float), contiguous, intent(inout), target :: dst(:)
    integer, intent(out), optional :: ierr
    call finish(qc_codec_decode_c(bytes_ptr(message), size(message, kind=c_size_t), buf_ptr(dst), &
                            size(dst, kind=c_size_t), QC_DTYPE_FLOAT32), 'qc_codec_decode', ierr)
  end subroutine qc_codec_decode

  ! ----------------------------------------------------------------------
  ! 8. Emulation
  ! ----------------------------------------------------------------------

  !> Allreduce over size(sendbufs, 2) virtual ranks in one call: column i
  !> of sendbufs / recvbufs is rank i-1's buffer. error_buffers, if present,
  !> holds one buffer per rank (each created with qc_comm() or for that
  !> rank; a NULL entry is allowed). Bit-identical to call call_index (0,
  !> the default: the first) of layer `layer` (absent: "*") in a real run.
  subroutine qc_emulate_allreduce(sendbufs, recvbufs, op, policy, error_buffers, ierr, layer, &
                                  call_index)
    real(c_float), contiguous, intent(in), target :: sendbufs(:, :)
    real(c_float), contiguous, intent(inout), target :: recvbufs(:, :)
    integer, intent(in) :: op
    type(qc_policy_t), intent(in) :: policy
    type(qc_error_buffer), intent(in), optional :: error_buffers(:)
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: layer
    integer(c_int64_t), intent(in), optional :: call_index
    type(c_ptr) :: sp(size(sendbufs, 2)), rp(size(sendbufs, 2))
    type(c_ptr), target :: ebs(size(sendbufs, 2))
    type(c_ptr) :: pebs
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player
    integer(c_int64_t) :: cindex
    integer :: r, n
    n = size(sendbufs, 2)
    player = optional_c_string(layer, clayer)
    cindex = 0
    if (present(call_index)) cindex = call_index
    if (any(shape(recvbufs) /= shape(sendbufs))) then
      call fail_here('qc_emulate_allreduce', 'recvbufs has a different shape than sendbufs', ierr)
      return
    end if
    pebs = c_null_ptr
    if (present(error_buffers)) then
      if (size(error_buffers) /= n) then
        call fail_here('qc_emulate_allreduce', 'error_buffers needs one entry per rank (column)', ierr)
        return
      end if
      ebs = error_buffers(:)%ptr
      if (n > 0) pebs = c_loc(ebs)
    end if
    do r = 1, n
      sp(r) = buf_ptr(sendbufs(:, r))
      rp(r) = buf_ptr(recvbufs(:, r))
    end do
    call finish(qc_emulate_allreduce_c(int(n, c_int), sp, rp, size(sendbufs, 1, kind=c_size_t), &
                                       QC_DTYPE_FLOAT32, int(op, c_int), player, cindex, &
                                       sized_policy(policy), pebs), &
                'qc_emulate_allreduce', ierr)
  end subroutine qc_emulate_allreduce

  !> Alltoall over size(sendbufs, 2) virtual ranks: column i is rank i-1's
  !> buffer, its size a multiple of the number of ranks. layer and
  !> call_index as for qc_emulate_allreduce.
  subroutine qc_emulate_alltoall(sendbufs, recvbufs, policy, ierr, layer, call_index)
    real(c_float), contiguous, intent(in), target :: sendbufs(:, :)
    real(c_float), contiguous, intent(inout), target :: recvbufs(:, :)
    type(qc_policy_t), intent(in) :: policy
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: layer
    integer(c_int64_t), intent(in), optional :: call_index
    type(c_ptr) :: sp(size(sendbufs, 2)), rp(size(sendbufs, 2))
    character(kind=c_char), allocatable, target :: clayer(:)
    type(c_ptr) :: player
    integer(c_int64_t) :: cindex
    integer :: r, n
    n = size(sendbufs, 2)
    player = optional_c_string(layer, clayer)
    cindex = 0
    if (present(call_index)) cindex = call_index
    if (any(shape(recvbufs) /= shape(sendbufs))) then
      call fail_here('qc_emulate_alltoall', 'recvbufs has a different shape than sendbufs', ierr)
      return
    end if
    if (n > 0) then
      if (mod(size(sendbufs, 1), n) /= 0) then
        call fail_here('qc_emulate_alltoall', 'size(sendbufs, 1) is not a multiple of the number of ranks', ierr)
        return
      end if
    end if
    do r = 1, n
      sp(r) = buf_ptr(sendbufs(:, r))
      rp(r) = buf_ptr(recvbufs(:, r))
    end do
    call finish(qc_emulate_alltoall_c(int(n, c_int), sp, rp, &
                                      size(sendbufs, 1, kind=c_size_t) / int(max(n, 1), c_size_t), &
                                      QC_DTYPE_FLOAT32, player, cindex, sized_policy(policy)), &
                'qc_emulate_alltoall', ierr)
  end subroutine qc_emulate_alltoall

end module qc
