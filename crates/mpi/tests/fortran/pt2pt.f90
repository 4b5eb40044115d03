! Point-to-point through `use mpi`: statuses (fields, MPI_Get_count, MPI_STATUS_IGNORE and
! MPI_STATUSES_IGNORE), wildcards, non-blocking calls with Waitall/Waitany (1-based
! indices), Sendrecv, communicators, a Fortran error handler, strings with hidden
! lengths, MPI_Wtime as a function, a predefined attribute. Every rank prints
! "pt2pt OK rank=r" at the end.
program pt2pt
    use mpi
    implicit none
    integer :: ierr, rank, size, i, n, next, prev, idx, flag_count
    integer :: status(MPI_STATUS_SIZE), statuses(MPI_STATUS_SIZE, 2)
    integer :: reqs(2)
    integer :: ibuf(10), jbuf(10)
    double precision :: dbuf(4), t0, t1
    character(len=MPI_MAX_PROCESSOR_NAME) :: pname
    character(len=MPI_MAX_OBJECT_NAME) :: cname
    character(len=MPI_MAX_ERROR_STRING) :: estr
    integer :: plen, clen, elen, dup, split, eh
    integer :: seen, seen_comm, seen_code
    common /errors_seen/ seen, seen_comm, seen_code
    external :: record_error
    integer(kind=MPI_ADDRESS_KIND) :: tagub
    logical :: found, flag

    seen = 0
    call MPI_Init(ierr)
    call check(ierr == MPI_SUCCESS, 'init')
    call MPI_Initialized(flag, ierr)
    call check(flag, 'initialized')
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
    next = mod(rank + 1, size)
    prev = mod(rank + size - 1, size)
    t0 = MPI_Wtime()

    ! Blocking ring: rank r sends r*100+i; the status names the source and tag.
    do i = 1, 10
        ibuf(i) = rank * 100 + i
    end do
    if (mod(rank, 2) == 0) then
        call MPI_Send(ibuf, 10, MPI_INTEGER, next, 7, MPI_COMM_WORLD, ierr)
        call MPI_Recv(jbuf, 10, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, status, ierr)
    else
        call MPI_Recv(jbuf, 10, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, status, ierr)
        call MPI_Send(ibuf, 10, MPI_INTEGER, next, 7, MPI_COMM_WORLD, ierr)
    end if
    call check(status(MPI_SOURCE) == prev, 'status source')
    call check(status(MPI_TAG) == 7, 'status tag')
    call MPI_Get_count(status, MPI_INTEGER, n, ierr)
    call check(n == 10, 'get_count')
    do i = 1, 10
        call check(jbuf(i) == prev * 100 + i, 'ring data')
    end do

    ! A shorter message into a larger buffer, status ignored.
    dbuf = -1d0
    call MPI_Sendrecv((/ 1.5d0 * rank, 2.5d0 * rank /), 2, MPI_DOUBLE_PRECISION, next, 3, &
                      dbuf, 4, MPI_DOUBLE_PRECISION, prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call check(dbuf(1) == 1.5d0 * prev .and. dbuf(2) == 2.5d0 * prev .and. dbuf(3) == -1d0, 'sendrecv')

    ! Non-blocking: the receive first, then the send, Waitall with statuses.
    jbuf = 0
    call MPI_Irecv(jbuf, 10, MPI_INTEGER, prev, 11, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Isend(ibuf, 5, MPI_INTEGER, next, 11, MPI_COMM_WORLD, reqs(2), ierr)
    call MPI_Waitall(2, reqs, statuses, ierr)
    call check(reqs(1) == MPI_REQUEST_NULL .and. reqs(2) == MPI_REQUEST_NULL, 'waitall frees')
    call check(statuses(MPI_SOURCE, 1) == prev .and. statuses(MPI_TAG, 1) == 11, 'waitall status')
    call MPI_Get_count(statuses(1, 1), MPI_INTEGER, n, ierr)
    call check(n == 5 .and. jbuf(5) == prev * 100 + 5 .and. jbuf(6) == 0, 'isend/irecv')

    ! Waitany's index counts from 1; MPI_STATUSES_IGNORE.
    call MPI_Irecv(jbuf, 10, MPI_INTEGER, prev, 12, MPI_COMM_WORLD, reqs(1), ierr)
    reqs(2) = MPI_REQUEST_NULL
    call MPI_Send(ibuf, 1, MPI_INTEGER, next, 12, MPI_COMM_WORLD, ierr)
    call MPI_Waitany(2, reqs, idx, status, ierr)
    call check(idx == 1, 'waitany index')
    call MPI_Waitany(2, reqs, idx, status, ierr)
    call check(idx == MPI_UNDEFINED, 'waitany undefined')
    call MPI_Irecv(jbuf, 10, MPI_INTEGER, prev, 13, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Isend(ibuf, 1, MPI_INTEGER, next, 13, MPI_COMM_WORLD, reqs(2), ierr)
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)

    ! Probe, then receive what it found.
    call MPI_Send(ibuf, 3, MPI_INTEGER, next, 14, MPI_COMM_WORLD, ierr)
    call MPI_Probe(MPI_ANY_SOURCE, 14, MPI_COMM_WORLD, status, ierr)
    call MPI_Get_count(status, MPI_INTEGER, flag_count, ierr)
    call check(flag_count == 3 .and. status(MPI_SOURCE) == prev, 'probe')
    call MPI_Recv(jbuf, flag_count, MPI_INTEGER, status(MPI_SOURCE), 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)

    ! Communicators: dup with a name, split by parity.
    call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
    call check(dup /= MPI_COMM_WORLD .and. dup /= MPI_COMM_NULL, 'dup')
    call MPI_Comm_set_name(dup, 'fortran dup   ', ierr)
    call MPI_Comm_get_name(dup, cname, clen, ierr)
    call check(cname == 'fortran dup' .and. clen == 11, 'comm name')
    call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), -rank, split, ierr)
    call MPI_Comm_size(split, n, ierr)
    call check(n == (size + 1 - mod(rank, 2)) / 2, 'split size')
    call MPI_Comm_rank(split, i, ierr)
    call check(i == (n - 1) - rank / 2, 'split rank (key reverses)')
    call MPI_Comm_free(split, ierr)
    call check(split == MPI_COMM_NULL, 'free sets null')
    ! A Fortran error handler on the duplicate: called with the communicator and the
    ! code, which the call then returns.
    call MPI_Comm_create_errhandler(record_error, eh, ierr)
    call MPI_Comm_set_errhandler(dup, eh, ierr)
    call MPI_Send(ibuf, 1, MPI_INTEGER, size + 5, 0, dup, ierr)
    call check(ierr /= MPI_SUCCESS .and. seen == 1 .and. seen_code == ierr &
               .and. seen_comm == dup, 'error handler')
    call MPI_Error_class(ierr, i, n)
    call check(i == MPI_ERR_RANK, 'error class')
    call MPI_Errhandler_free(eh, ierr)
    call MPI_Barrier(dup, ierr)
    call MPI_Comm_free(dup, ierr)

    ! Strings come back blank-padded, with their length.
    pname = 'x'
    call MPI_Get_processor_name(pname, plen, ierr)
    call check(plen > 0 .and. plen < MPI_MAX_PROCESSOR_NAME, 'processor name length')
    call check(len_trim(pname) == plen, 'processor name padded')
    call MPI_Error_string(MPI_ERR_TAG, estr, elen, ierr)
    call check(elen > 0 .and. len_trim(estr) == elen, 'error string')

    call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, tagub, found, ierr)
    call check(found .and. tagub >= 32767, 'tag_ub')

    t1 = MPI_Wtime()
    call check(t1 >= t0 .and. MPI_Wtick() > 0d0, 'wtime')

    print '(a,i0)', 'pt2pt OK rank=', rank
    call MPI_Finalize(ierr)

contains

    subroutine check(ok, what)
        logical, intent(in) :: ok
        character(len=*), intent(in) :: what
        integer :: e
        if (.not. ok) then
            print '(a,i0,2a)', 'pt2pt FAILED rank=', rank, ': ', what
            call MPI_Abort(MPI_COMM_WORLD, 1, e)
        end if
    end subroutine check

end program pt2pt

! Records the call: how many, on which communicator, which code.
subroutine record_error(comm, code)
    implicit none
    integer :: comm, code
    integer :: seen, seen_comm, seen_code
    common /errors_seen/ seen, seen_comm, seen_code
    seen = seen + 1
    seen_comm = comm
    seen_code = code
end subroutine record_error
