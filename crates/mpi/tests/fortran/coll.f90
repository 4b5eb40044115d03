! Collectives through `use mpi`: Bcast, Allreduce (MPI_SUM on INTEGER and
! DOUBLE PRECISION, MPI_LAND and MPI_LOR on LOGICAL, MPI_IN_PLACE), Reduce with
! MPI_MAXLOC on MPI_2DOUBLE_PRECISION, Alltoall, Allgather, Gatherv, Scan, a user-defined
! operation (MPI_Op_create with a Fortran subroutine) and a non-blocking Iallreduce.
! Every rank prints "coll OK rank=r".
program coll
    use mpi
    implicit none
    integer :: ierr, rank, np, i, root, myop, req
    integer :: ibuf(4), isum(4)
    integer, allocatable :: sendv(:), recvv(:), counts(:), displs(:), gathered(:)
    double precision :: d, dsum, pair(2), best(2)
    logical :: mine, all_true, any_true
    integer :: status(MPI_STATUS_SIZE)
    external :: maxabs

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)

    ! Bcast from the last rank.
    root = np - 1
    ibuf = 0
    if (rank == root) ibuf = (/ 4, 3, 2, 1 /)
    call MPI_Bcast(ibuf, 4, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    call check(all(ibuf == (/ 4, 3, 2, 1 /)), 'bcast')

    ! Allreduce: integers, doubles, in place.
    ibuf = (/ rank, 1, 2 * rank, -rank /)
    call MPI_Allreduce(ibuf, isum, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(isum(1) == np * (np - 1) / 2 .and. isum(2) == np .and. isum(3) == np * (np - 1) &
               .and. isum(4) == -np * (np - 1) / 2, 'allreduce integer')
    d = 0.5d0 * (rank + 1)
    call MPI_Allreduce(d, dsum, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(dsum == 0.25d0 * np * (np + 1), 'allreduce double')
    ibuf = rank + 1
    call MPI_Allreduce(MPI_IN_PLACE, ibuf, 4, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
    call check(all(ibuf == np), 'allreduce in place')

    ! LOGICAL reductions.
    mine = rank >= 0
    call MPI_Allreduce(mine, all_true, 1, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
    call check(all_true, 'land true')
    mine = rank == 1
    call MPI_Allreduce(mine, all_true, 1, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(mine, any_true, 1, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD, ierr)
    call check(.not. all_true .and. any_true, 'land/lor')

    ! MAXLOC on (value, index) pairs: the largest value is the middle rank's.
    pair(1) = -abs(dble(rank - np / 2))
    pair(2) = dble(rank)
    call MPI_Reduce(pair, best, 1, MPI_2DOUBLE_PRECISION, MPI_MAXLOC, 0, MPI_COMM_WORLD, ierr)
    if (rank == 0) call check(best(1) == 0d0 .and. best(2) == dble(np / 2), 'maxloc')

    ! Alltoall: rank r sends r*10+j to rank j.
    allocate(sendv(np), recvv(np), counts(np), displs(np), gathered(np * (np + 1) / 2))
    do i = 1, np
        sendv(i) = rank * 10 + (i - 1)
    end do
    call MPI_Alltoall(sendv, 1, MPI_INTEGER, recvv, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do i = 1, np
        call check(recvv(i) == (i - 1) * 10 + rank, 'alltoall')
    end do
    call MPI_Allgather(rank, 1, MPI_INTEGER, recvv, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do i = 1, np
        call check(recvv(i) == i - 1, 'allgather')
    end do

    ! Gatherv: rank r contributes r+1 copies of r.
    do i = 1, np
        counts(i) = i
        displs(i) = (i - 1) * i / 2
    end do
    sendv = rank
    gathered = -1
    call MPI_Gatherv(sendv, rank + 1, MPI_INTEGER, gathered, counts, displs, MPI_INTEGER, 0, &
                     MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        do i = 1, np
            call check(all(gathered(displs(i) + 1:displs(i) + i) == i - 1), 'gatherv')
        end do
    end if

    ! Scan.
    call MPI_Scan(rank + 1, i, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(i == (rank + 1) * (rank + 2) / 2, 'scan')

    ! A Fortran operation: the value of largest magnitude.
    call MPI_Op_create(maxabs, .true., myop, ierr)
    call check(ierr == MPI_SUCCESS, 'op_create')
    d = dble(rank) * (-1d0) ** rank
    call MPI_Allreduce(d, dsum, 1, MPI_DOUBLE_PRECISION, myop, MPI_COMM_WORLD, ierr)
    call check(abs(dsum) == dble(np - 1) .and. dsum == dble(np - 1) * (-1d0) ** (np - 1), 'user op')
    call MPI_Op_free(myop, ierr)
    call check(myop == MPI_OP_NULL, 'op_free')

    ! Non-blocking.
    ibuf = rank
    call MPI_Iallreduce(ibuf, isum, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, req, ierr)
    call MPI_Wait(req, status, ierr)
    call check(all(isum == np * (np - 1) / 2) .and. req == MPI_REQUEST_NULL, 'iallreduce')

    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    print '(a,i0)', 'coll OK rank=', rank
    call MPI_Finalize(ierr)

contains

    subroutine check(ok, what)
        logical, intent(in) :: ok
        character(len=*), intent(in) :: what
        integer :: e
        if (.not. ok) then
            print '(a,i0,2a)', 'coll FAILED rank=', rank, ': ', what
            call MPI_Abort(MPI_COMM_WORLD, 1, e)
        end if
    end subroutine check

end program coll

! inout(i) becomes whichever of in(i) and inout(i) has the larger magnitude.
subroutine maxabs(invec, inoutvec, n, datatype)
    use mpi
    implicit none
    integer, intent(in) :: n, datatype
    double precision, intent(in) :: invec(n)
    double precision, intent(inout) :: inoutvec(n)
    integer :: i
    if (datatype /= MPI_DOUBLE_PRECISION) stop 'maxabs: not MPI_DOUBLE_PRECISION'
    do i = 1, n
        if (abs(invec(i)) > abs(inoutvec(i))) inoutvec(i) = invec(i)
    end do
end subroutine maxabs
