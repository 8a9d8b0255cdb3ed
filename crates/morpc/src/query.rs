//! The CN query service client: what still runs on a CN (sessions,
//! pipelines, shard replicas). An error answer is a failure, never a count
//! of zero: a CN must not be recycled because it could not say how busy it
//! is.

use cnpool_registry::{RegistryError, Workload};
use tokio::time::Instant;

use crate::conn::{ConnectionOptions, ConnectionPool};
use crate::metrics::MorpcMetrics;
use crate::proto::{CountResponse, Empty, QueryMethod, QueryRequest, QueryResponse, Session, ShowProcessListRequest};

/// Which sessions keep a CN busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionCounting {
    /// Sessions that came through the proxy (`FromProxy`), as MatrixOne
    /// versions that report it allow.
    #[default]
    FromProxy,
    /// Sessions of a tenant account (not empty, not `sys`), for MatrixOne
    /// versions whose sessions do not say whether they came through the
    /// proxy.
    TenantAccounts,
}

impl SessionCounting {
    fn counts(self, session: &Session) -> bool {
        match self {
            Self::FromProxy => session.from_proxy,
            Self::TenantAccounts => !session.account.is_empty() && session.account != "sys",
        }
    }
}

/// A client of the query services of a cluster's CNs.
#[derive(Debug)]
pub struct QueryClient {
    pool: ConnectionPool,
    counting: SessionCounting,
    calls: MorpcMetrics,
}

impl QueryClient {
    pub fn new(options: ConnectionOptions, counting: SessionCounting) -> Self {
        Self::observed(options, counting, MorpcMetrics::default())
    }

    /// A client that counts its calls in `calls`.
    pub fn observed(options: ConnectionOptions, counting: SessionCounting, calls: MorpcMetrics) -> Self {
        Self { pool: ConnectionPool::new(options), counting, calls }
    }

    /// Sessions, pipelines and replicas on the CN whose query service is at
    /// `address`; the three calls run at once.
    pub async fn workload(&self, address: &str, deadline: Instant) -> Result<Workload, RegistryError> {
        let (sessions, pipelines, replicas) = tokio::try_join!(
            self.sessions(address, deadline),
            self.pipelines(address, deadline),
            self.replicas(address, deadline)
        )?;
        Ok(Workload { sessions, pipelines, replicas })
    }

    /// ShowProcessList over all tenants, counted as configured.
    pub async fn sessions(&self, address: &str, deadline: Instant) -> Result<u64, RegistryError> {
        const CALL: &str = "ShowProcessList";
        let request = QueryRequest {
            show_process_list: Some(ShowProcessListRequest { tenant: String::new(), sys_tenant: true }),
            ..request(QueryMethod::ShowProcessList)
        };
        let response = self.call(CALL, address, request, deadline).await?;
        let list = response.show_process_list.ok_or_else(|| RegistryError::Protocol {
            call: CALL,
            detail: "the answer carries no process list".to_owned(),
        })?;
        Ok(list.sessions.iter().filter(|session| self.counting.counts(session)).count() as u64)
    }

    /// GetPipelineInfo: pipelines running on the CN.
    pub async fn pipelines(&self, address: &str, deadline: Instant) -> Result<u64, RegistryError> {
        const CALL: &str = "GetPipelineInfo";
        let request = QueryRequest { get_pipeline_info: Some(Empty {}), ..request(QueryMethod::GetPipelineInfo) };
        let response = self.call(CALL, address, request, deadline).await?;
        let info = response.get_pipeline_info.ok_or_else(|| RegistryError::Protocol {
            call: CALL,
            detail: "the answer carries no pipeline count".to_owned(),
        })?;
        count(CALL, info)
    }

    /// GetReplicaCount: shard replicas the CN still hosts.
    pub async fn replicas(&self, address: &str, deadline: Instant) -> Result<u64, RegistryError> {
        const CALL: &str = "GetReplicaCount";
        let response = self.call(CALL, address, request(QueryMethod::GetReplicaCount), deadline).await?;
        count(CALL, response.get_replica_count)
    }

    /// Closes connections to query services `keep` refuses (CNs that left).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.pool.retain(keep);
    }

    async fn call(
        &self,
        call: &'static str,
        address: &str,
        request: QueryRequest,
        deadline: Instant,
    ) -> Result<QueryResponse, RegistryError> {
        crate::service::call(&self.pool, &self.calls, call, address, request, deadline).await
    }
}

fn request(method: QueryMethod) -> QueryRequest {
    QueryRequest { cmd_method: method as i32, ..QueryRequest::default() }
}

fn count(call: &'static str, answer: CountResponse) -> Result<u64, RegistryError> {
    u64::try_from(answer.count)
        .map_err(|_| RegistryError::Protocol { call, detail: format!("negative count {}", answer.count) })
}
